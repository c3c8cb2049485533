"""A withdrawn grant takes effect at once (docs/access.md, "Revoking a grant").

Every GRANT_CHECK seconds the credential cache asks each temporary identity's grant again
(engine/tencent/identities.py `recheck`: the pool's access policies, read at most POLICY_TTL
old). An identity refused is revoked there — its keys dropped, never renewed, no Pulumi run
re-signed with them — and here dropped from everything else that holds it: the fleet probe's
watches, the pools' held credentials (price reads, placement, deletion) and the sweep's
accounts. Its pools say why at once (a Degraded condition and a Warning Event, as their next run
would); nothing is launched or terminated. Granting it again is enough: the pool's next run
resolves it anew.
"""

import asyncio
import logging

from spotpool.engine.tencent.identities import CREDENTIALS, CredentialCache
from spotpool_operator.basics.failures import PoolProblem
from spotpool_operator.convergence.engine_runner import PoolWork

log = logging.getLogger("spotpool_operator.revocations")
GRANT_CHECK = 2.0  # seconds between two checks of every identity's grant


class Revocations(PoolWork):
    credential_cache: CredentialCache = CREDENTIALS

    async def keep_checking_grants(self, every: float = GRANT_CHECK) -> None:
        """Check every identity's grant every `every` seconds until cancelled."""
        while True:
            await asyncio.sleep(every)
            try:
                await self.drop_revoked()
            except Exception as error:  # the next check tries again; never a dead loop
                log.warning("checking the grants failed: %s", type(error).__name__)

    async def drop_revoked(self) -> list[str]:
        """Revoke the identities whose grant is refused now and drop every revoked one from
        what holds it; the uids of the pools that lost their credentials."""
        cache = self.credential_cache
        await asyncio.to_thread(cache.recheck)
        revoked = cache.revoked()
        if not revoked:
            return []
        if self.probe is not None:
            self.probe.forget_identities(revoked)
        if self.strays is not None:
            self.strays.forget(revoked)
        dropped = []
        for uid, pool in list(self.pools.items()):
            held = pool.credentials
            why = revoked.get(held.identity_key()) if held is not None else None
            if why is None:
                continue
            pool.credentials = None
            dropped.append(uid)
            ref = pool.latest
            if ref is None or pool.lock.locked():
                continue  # the operation under way fails on it, and says so
            ref.logger.warning("credentials revoked: %s", why.message)
            problem = PoolProblem(why.reason, why.message)
            await self._fail(pool, ref, pool.status, "refresh", problem, self.clock())
        return dropped
