"""On-demand fallbacks going back to spot, with hysteresis (spotpool.api.placement), and the
reclaimed offerings the placement avoids for a while."""

import asyncio
import time

from spotpool.api.placement import due_back_to_spot, seen_since, spot_sells_well
from spotpool.api.spec import ChargeType, OnDemandFallback, parse_duration
from spotpool_operator.basics.failures import PoolProblem
from spotpool_operator.basics.pools import PoolRef
from spotpool_operator.convergence.engine_runner import PoolWork


class SpotReturn(PoolWork):
    async def return_to_spot(self, ref: PoolRef) -> None:
        """Move the pool's on-demand fallbacks back to spot once spot stock has been seen
        selling for the hold period and they have been on-demand that long (one up)."""
        pool = self.pool(ref)
        if self.capacity is None or pool.lock.locked() or not pool.converged_once:
            return
        spec = await self._spec(pool, ref, "up", quiet=True)
        if spec.paused or spec.instance_charge_type is not ChargeType.SPOTPAID:
            return
        now = time.monotonic()
        on_demand = {
            i.slot
            for i in pool.status.instances
            if i.slot is not None and i.charge_type == ChargeType.POSTPAID_BY_HOUR
        }
        pool.on_demand_since = {s: pool.on_demand_since.get(s, now) for s in on_demand}
        if not on_demand:
            pool.spot_seen_since = None
            return
        credentials = pool.credentials or await self._credentials(pool, ref, spec, "up", quiet=True)
        wants = await asyncio.to_thread(self.capacity.wants, spec, credentials, spec.region)
        pool.spot_seen_since = seen_since(pool.spot_seen_since, spot_sells_well(wants), now)
        hold = parse_duration((spec.on_demand_fallback or OnDemandFallback()).return_after)
        due = due_back_to_spot(pool.on_demand_since, pool.spot_seen_since, now, hold)
        if not due:
            return
        async with pool.lock:
            ref.logger.info("spot stock is back: moving slots %s back to spot", due)
            pool.back_to_spot = set(due)
            try:
                await self._up(
                    pool, ref, spec, self._config(ref, spec), "ReturningToSpot",
                    f"moving on-demand slot(s) {', '.join(map(str, due))} back to spot",
                )  # fmt: skip
            except PoolProblem:
                # Refused (no stock after all): each waits a whole hold again, so it never flaps.
                for slot in due:
                    pool.on_demand_since[slot] = time.monotonic()
                raise
            finally:
                pool.back_to_spot = set()
        still = {i.slot for i in pool.status.instances if i.charge_type == ChargeType.SPOTPAID}
        moved = [s for s in due if s in still]
        for slot in due:  # a slot that stayed on-demand starts its wait again
            pool.on_demand_since[slot] = time.monotonic()
        if moved:
            self.events.post(
                ref.event_ref(),
                "Normal",
                "BackToSpot",
                f"spot stock is back: slot(s) {', '.join(map(str, moved))} moved from "
                "on-demand back to spot",
            )
