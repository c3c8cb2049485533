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

from spotpool.api.nodes import NodeSlot, NodesSpec
from spotpool.api.status import SpotpoolStatus
from spotpool_operator.nodes import finding
from spotpool_operator.nodes.draining import Drained, clear_gone, drain
from spotpool_operator.nodes.kubejson import NodeApi
from spotpool_operator.nodes.labelling import wanted_patch
from spotpool_operator.nodes.node_metrics import NodeMetrics
from spotpool_operator.reporting.events import Events

log = logging.getLogger("spotpool_operator.nodes")
NOTICE_MARGIN = 5.0  # seconds before the termination time a notice's drain ends


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
        self.waiting_since: dict[str, float] = {}  # instance -> first seen without a Ready node
        self.tasks: set[asyncio.Task[None]] = set()  # notices' drains, running on their own

    # --- status and labels ----------------------------------------------------------------

    async def observe(
        self, ref: "Pool", spec: NodesSpec, status: SpotpoolStatus
    ) -> tuple[list[NodeSlot], list[int]]:
        """status.nodes for the pool, its labels and taints written on each node, and the slots
        whose RUNNING instance has had no Ready node for readyTimeoutSeconds."""
        nodes = await asyncio.to_thread(self.api.nodes)
        found = finding.by_instance(nodes)
        for instance in status.instances:
            node = found.get(instance.instance_id)
            patch = wanted_patch(node, spec) if node else None
            if node and patch:
                try:
                    await asyncio.to_thread(self.api.patch_node, finding.name_of(node), patch)
                except Exception as error:  # a conflict or a gone node: the next look again
                    log.info("labelling %s: %s", finding.name_of(node), type(error).__name__)
        rows = finding.slot_nodes(status.instances, found)
        now = time.monotonic()
        late = []
        for row, instance in zip(rows, sorted(status.instances, key=_slot_order), strict=True):
            if row.ready or instance.state != "RUNNING":
                self.waiting_since.pop(row.instance_id, None)
                continue
            since = self.waiting_since.setdefault(row.instance_id, now)
            if now - since > spec.ready_timeout_seconds and row.slot is not None:
                late.append(row.slot)
        listed = {i.instance_id for i in status.instances}
        for gone in set(self.waiting_since) - listed:
            del self.waiting_since[gone]
        self.metrics.not_ready.labels(ref.namespace, ref.name).set(
            sum(1 for row in rows if not row.ready)
        )
        return rows, late

    def forget(self, ref: "Pool") -> None:
        with contextlib.suppress(KeyError):
            self.metrics.not_ready.remove(ref.namespace, ref.name)

    # --- drains -----------------------------------------------------------------------------

    async def drain_before(
        self, ref: "Pool", instance_ids: Iterable[str], why: str, timeout: float
    ) -> list[Drained]:
        """Drain the nodes of these instances at once (a voluntary termination follows), each
        within `timeout` seconds; instances without a node are skipped."""
        found = finding.by_instance(await asyncio.to_thread(self.api.nodes))
        nodes = [finding.name_of(found[i]) for i in instance_ids if i in found]
        if not nodes:
            return []
        deadline = time.monotonic() + timeout
        return list(
            await asyncio.gather(*(self._drain(ref, node, deadline, True, why) for node in nodes))
        )

    def drain_on_notice(self, ref: "Pool", instance_id: str, termination: datetime) -> None:
        """A notice: drain the instance's node in the background (the surge replacement is
        launched already), ending NOTICE_MARGIN seconds before the termination time."""
        left = termination.timestamp() - time.time() - NOTICE_MARGIN
        task = asyncio.ensure_future(self._notice(ref, instance_id, max(left, 0.0)))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _notice(self, ref: "Pool", instance_id: str, left: float) -> None:
        try:
            found = finding.by_instance(await asyncio.to_thread(self.api.nodes))
            node = found.get(instance_id)
            if node is None:
                return
            why = f"termination notice of {instance_id}"
            await self._drain(ref, finding.name_of(node), time.monotonic() + left, False, why)
        except Exception as error:  # the reclaim still deletes the Node when it comes
            log.warning("drain on notice of %s failed: %s", instance_id, error)

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

    def gone_soon(self, ref: "Pool", instance_ids: Iterable[str]) -> None:
        """`gone` in the background: the replacement's launch waits for no Kubernetes call."""
        task = asyncio.ensure_future(self.gone(ref, list(instance_ids)))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def gone(self, ref: "Pool", instance_ids: Iterable[str]) -> None:
        """The cloud took these instances: their Nodes deleted at once, their pods evicted."""
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
            if existed:
                self.events.post(
                    ref.event_ref(), "Warning", "NodeGone",
                    f"node {node} of {instance} deleted: the cloud took the instance; "
                    f"{evicted} pod(s) evicted to be scheduled again now",
                )  # fmt: skip


def _slot_order(instance: Any) -> tuple[bool, int]:
    return (instance.slot is None, instance.slot or 0)
