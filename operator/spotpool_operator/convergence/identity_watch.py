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

log = logging.getLogger("spotpool_operator.claims")


class IdentityWatch(PoolWork):
    claims: IdentityClaims | None = None  # runner.py

    async def keep_claiming(self, every: float = RENEW_EVERY) -> None:
        """Renew this process's claim every `every` seconds until cancelled; a conflict is
        said on every pool when it begins (and again if its rivals change)."""
        if self.claims is None:
            return
        said: str | None = None
        while True:
            try:
                problem = await asyncio.to_thread(self.claims.check)
                if problem is not None and problem != said:
                    await self.say_conflict(problem)
                said = problem
            except Exception as error:  # the next renewal tries again; never a dead loop
                log.warning("renewing the identity claim failed: %s", type(error).__name__)
            await asyncio.sleep(every)

    async def say_conflict(self, message: str) -> list[str]:
        """Degrade every pool served here (not one under way: its run is refused and says
        so); the uids told."""
        told = []
        problem = PoolProblem("IdentityConflict", message)
        for uid, pool in list(self.pools.items()):
            ref = pool.latest
            if ref is None or pool.lock.locked():
                continue
            await self._fail(pool, ref, pool.status, "refresh", problem, self.clock())
            told.append(uid)
        return told
