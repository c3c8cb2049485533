"""Two live operators with one identity (cloud/claims.py): every pool says so at once.

The claim is renewed every few seconds; when the verdict turns to a conflict, every pool this
replica serves gets the Degraded condition `IdentityConflict` and a Warning Event (its next
run would say the same: the engine's guard refuses it). Nothing is adopted, re-tagged or
swept meanwhile. Once a person resolves it (one of the two stopped, or given an identity of
its own), the other's claim ages out and each pool's next run clears the condition.
"""

import asyncio
import logging

from spotpool.engine.leftovers.claims import RENEW_EVERY
from spotpool_operator.basics.failures import PoolProblem
from spotpool_operator.cloud.claims import IdentityClaims
from spotpool_operator.convergence.engine_runner import PoolWork
from spotpool_operator.reporting import status as render
from spotpool_operator.reporting.events import Events

log = logging.getLogger("spotpool_operator.claims")


class IdentityWatch(PoolWork):
    claims: IdentityClaims | None = None  # runner.py
    direct_events: Events | None = None  # runner.py: events.DirectEvents

    async def keep_claiming(self, every: float = RENEW_EVERY) -> None:
        """Renew this process's claim every `every` seconds until cancelled; a conflict is
        said on every pool once (again if its rivals change)."""
        if self.claims is None:
            return
        said: str | None = None
        told: set[str] = set()  # pools told of `said` (one seen later is told then)
        while True:
            try:
                problem = await asyncio.to_thread(self.claims.check)
                if problem != said:
                    said, told = problem, set()
                if problem is not None:
                    told |= set(await self.say_conflict(problem, told))
            except Exception as error:  # the next renewal tries again; never a dead loop
                log.warning("renewing the identity claim failed: %s", type(error).__name__)
            await asyncio.sleep(every)

    async def say_conflict(self, message: str, skip: set[str] | None = None) -> list[str]:
        """Degrade every pool served here but those in `skip` (not one under way: its run is
        refused and says so; it is told at the next renewal); the uids told."""
        told = []
        problem = PoolProblem("IdentityConflict", message)
        for uid, pool in list(self.pools.items()):
            ref = pool.latest
            if ref is None or pool.lock.locked() or uid in (skip or ()):
                continue
            if not self.serving(ref):
                continue  # another replica's pool now: it says so
            failed = render.failed(pool.status, "refresh", problem.reason, problem.message,
                                   ref.generation, self.clock(), self.clock())  # fmt: skip
            await self._write(pool, ref, failed)
            # Outside kopf's handlers there is no kopf event queue: straight to the API server.
            events = self.direct_events or self.events
            await asyncio.to_thread(events.post, ref.event_ref(), "Warning", problem.reason,
                                    problem.message)  # fmt: skip
            told.append(uid)
        return told
