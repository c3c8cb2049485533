"""What the pool jobs call for pools whose instances are nodes (spec.nodes): the status rows
and labels (observe), a drain before instances go (drain_before, drain_on_notice) and the Nodes
of reclaimed instances deleted (gone), with Events (Draining, Drained, NodeGone) and metrics.
The blocking API calls run in threads."""

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from spotpool.api.nodes import NodeSlot, NodesSpec, is_ready
from spotpool.api.status import SpotpoolStatus
from spotpool_operator.nodes import finding
from spotpool_operator.nodes.draining import Drained, clear_gone, cordon, drain, stays
from spotpool_operator.nodes.kubejson import NodeApi
from spotpool_operator.nodes.labelling import wanted_patch
from spotpool_operator.nodes.node_metrics import NodeMetrics
from spotpool_operator.reporting.events import Events

log = logging.getLogger("spotpool_operator.nodes")
NOTICE_MARGIN = 5.0  # seconds before the termination time a notice's drain ends
SHARED_LIST = 2.0  # seconds a Node listing serves every pool's look (one list, many pools)


class Pool(Protocol):
    """What the keeper needs of a pool (basics.pools.PoolRef has it)."""

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def logger(self) -> logging.Logger | logging.LoggerAdapter[logging.Logger]: ...

    def event_ref(self) -> dict[str, Any]: ...


class NodeKeeper:
    def __init__(self, api: NodeApi, events: Events, registry: CollectorRegistry) -> None:
        self.api, self.events = api, events
        self.metrics = NodeMetrics(registry)
        # (namespace, pool) -> instance -> first seen without a Ready node
        self.waiting: dict[tuple[str, str], dict[str, float]] = {}
        self.tasks: set[asyncio.Task[None]] = set()  # notices' drains, running on their own

    # --- status and labels ----------------------------------------------------------------

    async def observe(
        self, ref: "Pool", spec: NodesSpec, status: SpotpoolStatus
    ) -> tuple[list[NodeSlot], list[int]]:
        """status.nodes for the pool, its labels and taints written on each node, and the slots
        whose RUNNING instance has had no Ready node for readyTimeoutSeconds."""
        nodes = await asyncio.to_thread(self.api.nodes, SHARED_LIST)
        found = finding.by_instance(nodes)
        # A surge's node too: the pods a notice's drain evicts land there (its nodeSelector).
        for instance_id in [i.instance_id for i in status.instances] + [
            s.instance_id for s in status.surges
        ]:
            node = found.get(instance_id)
            if node:
                await self._label(node, spec)
        rows = finding.slot_nodes(status.instances, found)
        now = time.monotonic()
        late = []
        waiting = self.waiting.setdefault((ref.namespace, ref.name), {})  # this pool's alone
        for row, instance in zip(rows, sorted(status.instances, key=_slot_order), strict=True):
            if row.ready or instance.state != "RUNNING":
                waiting.pop(row.instance_id, None)
                continue
            since = waiting.setdefault(row.instance_id, now)
            if now - since > spec.ready_timeout_seconds and row.slot is not None:
                late.append(row.slot)
        listed = {i.instance_id for i in status.instances}
        for gone in set(waiting) - listed:
            del waiting[gone]
        self.metrics.not_ready.labels(ref.namespace, ref.name).set(
            sum(1 for row in rows if not row.ready)
        )
        return rows, late

    async def _label(self, node: dict[str, Any], spec: NodesSpec) -> bool:
        """The pool's labels and taints on `node`; True when it has them now."""
        patch = wanted_patch(node, spec)
        if not patch:
            return True
        try:
            await asyncio.to_thread(self.api.patch_node, finding.name_of(node), patch)
        except Exception as error:  # a conflict or a gone node: the next look again
            log.info("labelling %s: %s", finding.name_of(node), type(error).__name__)
            return False
        return True

    def forget(self, ref: "Pool") -> None:
        self.waiting.pop((ref.namespace, ref.name), None)
        with contextlib.suppress(KeyError):
            self.metrics.not_ready.remove(ref.namespace, ref.name)

    # --- drains -----------------------------------------------------------------------------

    async def drain_before(
        self, ref: "Pool", instance_ids: Iterable[str], why: str, spec: NodesSpec,
        keep: Iterable[str] = (),
    ) -> list[Drained]:  # fmt: skip
        """Drain the nodes of these instances at once (a voluntary termination follows), each
        within drainTimeoutSeconds; instances without a node are skipped. The nodes of `keep`
        (the pool's instances that stay) get the pool's labels and taints first: a node that
        registered since the last look would otherwise take none of the evicted pods."""
        found = finding.by_instance(await asyncio.to_thread(self.api.nodes))
        for instance in keep:
            if instance in found:
                await self._label(found[instance], spec)
        nodes = [finding.name_of(found[i]) for i in instance_ids if i in found]
        if not nodes:
            return []
        deadline = time.monotonic() + spec.drain_timeout_seconds
        return list(
            await asyncio.gather(*(self._drain(ref, node, deadline, True, why) for node in nodes))
        )

    def pods_by_instance(self, instance_ids: Iterable[str]) -> dict[str, int]:
        """Blocking (an engine thread's): pods that would have to move off each instance's node
        (DaemonSet, mirror and finished pods left out), for draining the emptiest first."""
        found = finding.by_instance(self.api.nodes())
        return {
            i: sum(1 for pod in self.api.pods_on(finding.name_of(found[i])) if not stays(pod))
            for i in instance_ids
            if i in found
        }

    def drain_on_notice(
        self, ref: "Pool", instance_id: str, termination: datetime, surge_id: str | None = None,
        spec: NodesSpec | None = None,
    ) -> None:  # fmt: skip
        """A notice: drain the instance's node in the background (the surge replacement
        `surge_id` is launched already), ending NOTICE_MARGIN seconds before the termination
        time. The node is cordoned at once; its pods are evicted once the surge's node is Ready
        with the pool's labels (so they land there, not in Pending), or at half the time left."""
        left = termination.timestamp() - time.time() - NOTICE_MARGIN
        task = asyncio.ensure_future(
            self._notice(ref, instance_id, max(left, 0.0), surge_id, spec or NodesSpec())
        )
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _notice(
        self, ref: "Pool", instance_id: str, left: float, surge_id: str | None, spec: NodesSpec
    ) -> None:
        try:
            deadline = time.monotonic() + left
            found = finding.by_instance(await asyncio.to_thread(self.api.nodes))
            node = found.get(instance_id)
            if node is None:
                return
            name = finding.name_of(node)
            await asyncio.to_thread(cordon, self.api, name)  # no new pods on it from now on
            if surge_id is not None:
                ready = await self._await_node(surge_id, spec, time.monotonic() + left / 2)
                if not ready:
                    ref.logger.info("draining %s before %s's node is Ready", name, surge_id)
            why = f"termination notice of {instance_id}"
            await self._drain(ref, name, deadline, False, why)
        except Exception as error:  # the reclaim still deletes the Node when it comes
            log.warning("drain on notice of %s failed: %s", instance_id, error)

    async def _await_node(self, instance_id: str, spec: NodesSpec, until: float) -> bool:
        """Wait until `instance_id`'s node is Ready and carries the pool's labels and taints
        (written here as soon as it registers), or `until` (a monotonic time)."""
        while True:
            node = finding.by_instance(await asyncio.to_thread(self.api.nodes)).get(instance_id)
            if node is not None and await self._label(node, spec) and is_ready(node):
                return True
            if time.monotonic() >= until:
                return False
            await asyncio.sleep(min(1.0, max(0.0, until - time.monotonic())))

    async def _drain(
        self, ref: "Pool", node: str, deadline: float, voluntary: bool, why: str
    ) -> Drained:
        event = ref.event_ref()
        self.events.post(event, "Normal", "Draining", f"cordoning and draining node {node}: {why}")
        result = await asyncio.to_thread(drain, self.api, node, deadline, voluntary)
        self.metrics.evicted.labels(ref.namespace, ref.name).inc(len(result.evicted))
        self.metrics.drain_seconds.labels(ref.namespace, ref.name).observe(result.seconds)
        said = f"node {node}: {len(result.evicted)} pod(s) evicted in {result.seconds:.1f} s"
        if result.refused:
            said += f", {result.refused} eviction(s) refused by a PodDisruptionBudget and retried"
        if result.protected:
            said += f"; do-not-disrupt: {', '.join(result.protected)}"
        if result.timed_out:
            said += f"; still on it at the deadline: {', '.join(result.left) or 'none'}"
        self.events.post(event, "Warning" if result.timed_out else "Normal", "Drained", said)
        ref.logger.info("drained %s", said)
        return result

    # --- reclaims ---------------------------------------------------------------------------

    def gone_soon(self, ref: "Pool", instance_ids: Iterable[str], why: str = "") -> None:
        """`gone` in the background: the replacement's launch waits for no Kubernetes call."""
        task = asyncio.ensure_future(self.gone(ref, list(instance_ids), why))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def gone(self, ref: "Pool", instance_ids: Iterable[str], why: str = "") -> None:
        """These instances are gone: their Nodes deleted at once, their pods evicted. `why`:
        the operator terminated them itself (a scale-down, a rollout; drained before), else
        the cloud took them."""
        wanted = set(instance_ids)
        found = finding.by_instance(await asyncio.to_thread(self.api.nodes))
        for instance in sorted(wanted & set(found)):
            node = finding.name_of(found[instance])
            try:
                existed, evicted = await asyncio.to_thread(clear_gone, self.api, node)
            except Exception as error:  # the node monitor and the pod GC still get there
                log.warning("deleting node %s failed: %s", node, type(error).__name__)
                continue
            self.metrics.evicted.labels(ref.namespace, ref.name).inc(evicted)
            if existed and why:
                self.events.post(
                    ref.event_ref(), "Normal", "NodeGone",
                    f"node {node} of {instance} deleted: the instance was terminated ({why})"
                    + (f"; {evicted} pod(s) left on it evicted" if evicted else ""),
                )  # fmt: skip
            elif existed:
                self.events.post(
                    ref.event_ref(), "Warning", "NodeGone",
                    f"node {node} of {instance} deleted: the cloud took the instance; "
                    f"{evicted} pod(s) evicted to be scheduled again now",
                )  # fmt: skip


def _slot_order(instance: Any) -> tuple[bool, int]:
    return (instance.slot is None, instance.slot or 0)
