"""The pool jobs' side of spec.nodes (the node work itself: spotpool_operator.nodes): the drain
before a voluntary termination (scale-down, rollout, drift correction, deletion) and the Nodes
of reclaimed instances deleted; the look at the nodes every NODE_LOOK seconds is node_looks.py.
A pool without spec.nodes makes none of these calls."""

import asyncio
from collections.abc import Callable

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
    async def drain_going(
        self, ref: PoolRef, spec: NodesSpec | None, config: StackConfig | None, why: str
    ) -> None:
        """Before an up that leaves slots beyond `config.count` (a scale-down: the highest
        slots go, slots are positional), or a destroy (`config` None): drain the nodes of the
        instances that go, within drainTimeoutSeconds."""
        if spec is None or self.nodes is None:
            return
        pool = self.pool(ref)
        going = [
            i.instance_id
            for i in pool.status.instances
            if config is None or (i.slot is not None and i.slot >= config.count)
        ]
        keep = [i.instance_id for i in pool.status.instances if i.instance_id not in going]
        if going:
            await self.nodes.drain_before(
                ref, going, why, spec, keep + [s.instance_id for s in pool.status.surges]
            )

    def rollout_hooks(
        self, ref: PoolRef, spec: NodesSpec | None
    ) -> tuple[Callable[[list[int]], list[int]], Callable[[list[int]], None]] | None:
        """For a rollout (or a drift correction) of a pool with spec.nodes, called in the
        engine's thread: the replaced slots ordered emptiest node first (pods that would have
        to move), and each batch's nodes drained on the event loop before its instances go.
        None for a pool without spec.nodes."""
        keeper = self.nodes
        if spec is None or keeper is None:
            return None
        loop = asyncio.get_running_loop()
        pool = self.pool(ref)

        def ids(slots: list[int]) -> dict[int, str]:
            held = {i.slot: i.instance_id for i in pool.status.instances}
            return {s: held[s] for s in slots if s in held}

        def order(slots: list[int]) -> list[int]:
            try:
                pods = keeper.pods_by_instance(ids(slots).values())
            except Exception as error:  # slot order, as without spec.nodes
                ref.logger.info("counting the nodes' pods failed: %s", type(error).__name__)
                return slots
            held = ids(slots)
            return sorted(slots, key=lambda s: (pods.get(held.get(s, ""), 0), s))

        def before(slots: list[int]) -> None:
            going = ids(slots)
            keep = [i.instance_id for i in pool.status.instances if i.slot not in going]
            drain = keeper.drain_before(ref, going.values(), "rollout", spec, keep)
            future = asyncio.run_coroutine_threadsafe(drain, loop)
            try:
                future.result(timeout=spec.drain_timeout_seconds + 60)
            except Exception as error:  # the batch goes ahead, as after a drain's deadline
                future.cancel()
                ref.logger.warning("draining before the batch failed: %s", error)

        return order, before

    async def nodes_gone(self, ref: PoolRef, instance_ids: list[str], why: str = "") -> None:
        """These instances are gone (the cloud took them without notice; or, with `why`, the
        operator terminated them): their Nodes go at once."""
        if self.nodes is not None and instance_ids and nodes_of(dict(ref.spec)) is not None:
            self.nodes.gone_soon(ref, instance_ids, why)
