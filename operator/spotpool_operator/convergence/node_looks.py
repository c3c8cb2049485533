"""The pool daemon's look at a pool's nodes (spec.nodes) every few seconds: status.nodes, the
pool's labels and taints on them, and each instance whose node is not Ready within
readyTimeoutSeconds replaced as a failed launch is. The n-th such replacement in a row comes no
sooner than the operator's failure backoff after the one before (settings.backoff: 10 s doubling
to 5 min), so a join that never works costs one replacement per backoff, not a busy loop. A
pool without spec.nodes makes none of these calls."""

import time

from spotpool.api.nodes import NodesSpec
from spotpool_operator.basics.pools import PoolRef, PoolState
from spotpool_operator.convergence.engine_runner import PoolWork
from spotpool_operator.convergence.node_hooks import NODE_LOOK, nodes_of


class NodeLooks(PoolWork):
    async def look_at_nodes(self, ref: PoolRef) -> bool:
        """With spec.nodes: status.nodes written when it moved, the labels and taints on the
        nodes, the instances whose node is not Ready in time replaced. False (no call made)
        for a pool without spec.nodes, or when no look is due."""
        spec = nodes_of(dict(ref.spec))
        pool = self.pool(ref)
        if spec is None or self.nodes is None or not self.serving(ref):
            return False
        if time.monotonic() - pool.nodes_looked < NODE_LOOK:
            return True
        pool.nodes_looked = time.monotonic()
        try:  # labels too while an operation runs: a drain's pods need the new nodes labelled
            rows, late = await self.nodes.observe(ref, spec, pool.status)
        except Exception as error:  # no rights, the API server away: looked at again later
            ref.logger.warning("looking at the pool's nodes failed: %s", type(error).__name__)
            return True
        if pool.lock.locked():
            return True  # the status and the late instances: at the next look
        async with pool.lock:
            if rows != pool.status.nodes:
                await self._write(pool, ref, pool.status.model_copy(update={"nodes": rows}))
        if rows and all(row.ready for row in rows):
            pool.node_renewals = 0  # the joins work: a later late node is replaced at once
        if late:
            lates = {r.slot: r.instance_id for r in rows if r.slot is not None and r.slot in late}
            await self._renew_late(pool, ref, spec, lates)
        pool.late_nodes &= set(late)
        return True

    async def _renew_late(
        self, pool: PoolState, ref: PoolRef, nodes: NodesSpec, late: dict[int, str]
    ) -> None:
        """Replace the instances of `late` (slot -> instance) as failed launches, unless the
        backoff after the previous replacement holds them (said once per slot)."""
        timeout = nodes.ready_timeout_seconds
        if pool.node_renewals:
            wait = pool.node_renewed_at + self.settings.backoff(pool.node_renewals - 1)
            if (left := wait - time.monotonic()) > 0:
                for slot in sorted(set(late) - pool.late_nodes):
                    pool.late_nodes.add(slot)
                    self.events.post(
                        ref.event_ref(), "Warning", "NodeNotReady",
                        f"slot {slot}'s instance {late[slot]} has had no Ready node for more "
                        f"than {timeout} s: replaced in {left:.0f} s ({pool.node_renewals} "
                        "replaced in a row already); check its userData's join",
                    )  # fmt: skip
                return
        pool.node_renewals += 1
        pool.node_renewed_at = time.monotonic()
        try:
            async with pool.lock:
                spec = await self._spec(pool, ref, "up", quiet=True)
                config = self._config(ref, spec)
                now = {i.slot: i.instance_id for i in pool.status.instances}
                slots = sorted(s for s, i in late.items() if now.get(s) == i)
                if spec.paused or config != pool.applied or not slots:
                    return  # paused, a spec change's up comes first, or replaced meanwhile
                names = ", ".join(f"slot {s} ({now[s]})" for s in slots)
                self.events.post(
                    ref.event_ref(), "Warning", "NodeNotReady",
                    f"no Ready node within {timeout} s for {names}: replacing the instance(s) "
                    "as a failed launch; check the userData's join",
                )  # fmt: skip
                ref.logger.warning("no Ready node in time: replacing %s", names)
                result = await self._up(
                    pool, ref, spec, config, "Replacing",
                    "replacing instances whose node was not Ready in time", slots, renew=True,
                )  # fmt: skip
        except Exception as error:  # _up said why (condition, Event); the next look again
            ref.logger.warning("replacing late nodes' instances failed: %s", error)
            return
        new = [i for i in result.instances if i.slot in slots and i.instance_id != now[i.slot]]
        if new:
            self.events.post(
                ref.event_ref(), "Normal", "Replaced",
                "replaced instance(s) whose node was not Ready in time: "
                + ", ".join(f"slot {i.slot} now {i.instance_id}" for i in new),
            )  # fmt: skip
