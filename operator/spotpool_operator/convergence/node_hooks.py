"""The pool jobs' side of spec.nodes (the node work itself: spotpool_operator.nodes): a look
at the pool's nodes every few seconds (status.nodes, labels and taints, nodes not Ready in
time), and the drain before a voluntary termination (scale-down, deletion). A pool without
spec.nodes makes none of these calls."""

import time

from spotpool.api.nodes import NodesSpec
from spotpool.api.stackconfig import StackConfig
from spotpool_operator.basics.pools import PoolRef
from spotpool_operator.convergence.pool_book import PoolBook

NODE_LOOK = 5.0  # seconds between looks at a pool's nodes


def nodes_of(raw: object) -> NodesSpec | None:
    """spec.nodes of a raw spec, None when unset or not understood (the up says why)."""
    value = raw.get("nodes") if isinstance(raw, dict) else None
    if not value:
        return None
    try:
        return NodesSpec.model_validate(value)
    except ValueError:
        return None


class NodeHooks(PoolBook):
    async def look_at_nodes(self, ref: PoolRef) -> bool:
        """With spec.nodes: status.nodes written when it moved, the labels and taints on the
        nodes, a Warning for an instance whose node is not Ready in time. False (no call made)
        for a pool without spec.nodes, or when no look is due."""
        spec = nodes_of(dict(ref.spec))
        pool = self.pool(ref)
        if spec is None or self.nodes is None or not self.serving(ref):
            return False
        if time.monotonic() - pool.nodes_looked < NODE_LOOK or pool.lock.locked():
            return True
        pool.nodes_looked = time.monotonic()
        try:
            rows, late = await self.nodes.observe(ref, spec, pool.status)
        except Exception as error:  # no rights, the API server away: looked at again later
            ref.logger.warning("looking at the pool's nodes failed: %s", type(error).__name__)
            return True
        async with pool.lock:
            if rows != pool.status.nodes:
                await self._write(pool, ref, pool.status.model_copy(update={"nodes": rows}))
        for slot in late:
            if slot not in pool.late_nodes:
                pool.late_nodes.add(slot)
                self.events.post(
                    ref.event_ref(), "Warning", "NodeNotReady",
                    f"slot {slot}'s instance has had no Ready node for more than "
                    f"{spec.ready_timeout_seconds} s: check its userData's join",
                )  # fmt: skip
        pool.late_nodes &= set(late)
        return True

    async def drain_going(
        self, ref: PoolRef, spec: NodesSpec | None, config: StackConfig | None, why: str
    ) -> None:
        """Before an up that leaves slots beyond `config.count` (a scale-down), or a destroy
        (`config` None): drain the nodes of the instances that go, within drainTimeoutSeconds."""
        if spec is None or self.nodes is None:
            return
        pool = self.pool(ref)
        going = [
            i.instance_id
            for i in pool.status.instances
            if config is None or (i.slot is not None and i.slot >= config.count)
        ]
        if going:
            await self.nodes.drain_before(ref, going, why, spec.drain_timeout_seconds)

    async def nodes_gone(self, ref: PoolRef, instance_ids: list[str]) -> None:
        """The cloud took these instances without notice: their Nodes go at once."""
        if self.nodes is not None and nodes_of(dict(ref.spec)) is not None:
            self.nodes.gone_soon(ref, instance_ids)
