"""The last net against leaks: instances of this install tagged for a pool that no longer
exists (a late fast-path launch for a deleted pool, a destroy that could not finish, a replica
that wrote after its shard moved) are terminated once they are older than the orphan grace.

Every (key pair, region) a pool of this replica used is remembered (for as long as the grace
and a day: a deleted pool's late instance still needs its key pair) and swept every
`interval`: the fleet is listed first, the Spotpools of the cluster after it (a pool exists
before anything is created for it, so a uid missing from the later listing is a deleted pool's),
then one pure decision (engine/leftovers/orphans.py `decide_strays`) says what goes: only this
install's, only old enough, only the pools of the shards this replica holds, at most `cap` a pass.
Each termination is an Event (on the deleted pool's name, in its namespace), a log line and
`spotpool_orphans_swept_total`.
"""

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from spotpool.api.spec import GROUP, VERSION
from spotpool.engine.leftovers.orphans import Action, Decision, Fleet, Tagged, decide_strays
from spotpool.engine.tencent.cloud import FleetInstance
from spotpool.engine.tencent.credentials import Credentials
from spotpool_operator.reporting.events import Events

log = logging.getLogger("spotpool_operator.strays")
KEEP_ACCOUNT = 86400.0  # seconds a key pair is swept after its last pool here, beyond the grace

FleetLister = Callable[[Credentials, str], list[FleetInstance]]
Terminator = Callable[[Credentials, str, list[str]], None]
# Which of these pool uids (uid -> "namespace/name") are a Spotpool's now (kube.py)
PoolUids = Callable[[Mapping[str, str | None]], set[str]]


@dataclass
class _Account:
    credentials: Credentials
    region: str
    seen: float  # monotonic: the last time a pool of this replica used it


class StraySweep:
    def __init__(
        self,
        lister: FleetLister,
        terminate: Terminator,
        pool_uids: PoolUids,
        serves: Callable[[str], bool],
        events: Events,
        install_id: str,
        grace: float,
        kept: Callable[[], set[str]] = set,
        on_swept: Callable[[int], None] = lambda count: None,
        cap: int = 100,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.lister, self.terminate, self.pool_uids = lister, terminate, pool_uids
        self.kept = kept  # uids of the pools deleted with Retain (the backend's record)
        self.serves, self.events, self.on_swept = serves, events, on_swept
        self.install_id, self.grace, self.cap, self.clock = install_id, grace, cap, clock
        self.accounts: dict[tuple[str, str, str], _Account] = {}
        self.swept = 0  # terminated, in all
        self.passes = 0
        self._told: set[tuple[str, str]] = set()  # (instance, reason) left and said so

    @property
    def interval(self) -> float:
        """A third of the grace (a stray lives at most about 4/3 of it), between 5 s and 5 min."""
        return min(300.0, max(5.0, self.grace / 3))

    def remember(self, credentials: Credentials, region: str) -> None:
        """A pool of this replica uses this key pair and region: sweep it from now on."""
        key = (credentials.identity_key(), "", region)  # temporary keys renew; this stays
        self.accounts[key] = _Account(credentials, region, time.monotonic())

    async def run(self) -> None:
        """Sweep every `interval` until cancelled; a failed pass is logged and retried."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.sweep()
            except Exception as error:  # the next pass tries again; never a dead loop
                log.warning("sweep of deleted pools' instances failed: %s", _code(error))

    async def sweep(self) -> list[Decision]:
        """One pass over every remembered key pair and region; what was terminated."""
        forget_before = time.monotonic() - self.grace - KEEP_ACCOUNT
        for key in [k for k, a in self.accounts.items() if a.seen < forget_before]:
            del self.accounts[key]
        terminated: list[Decision] = []
        for account in list(self.accounts.values()):
            terminated += await self._sweep(account)
        self.passes += 1
        log.debug(
            "stray sweep %d: %d key pair(s) and region(s), %d terminated",
            self.passes, len(self.accounts), len(terminated),
        )  # fmt: skip
        return terminated

    async def _sweep(self, account: _Account) -> list[Decision]:
        found = await asyncio.to_thread(self.lister, account.credentials, account.region)
        if not found:
            return []
        candidates = {  # a served pool's instance of this install: its pool may be gone
            item.pool_uid: item.pool
            for item in found
            if item.install == self.install_id and item.pool_uid and self.serves(item.pool_uid)
        }
        pools = await asyncio.to_thread(self.pool_uids, candidates)  # after the instances
        kept = await asyncio.to_thread(self.kept)
        tagged: dict[str, list[Tagged]] = {}
        for item in found:
            tagged.setdefault(item.pool_uid, []).append(_tagged(item))
        fleet = Fleet(
            install_id=self.install_id,
            pools=frozenset(pools),
            kept=frozenset(kept),
            serves=self.serves,
            now=self.clock(),
            min_age=timedelta(seconds=self.grace),
            cap=self.cap,
        )
        decisions = decide_strays(fleet, tagged)
        for left in (d for d in decisions if d.action is Action.LEAVE):
            if (left.instance_id, left.reason) not in self._told:  # once, not every pass
                self._told.add((left.instance_id, left.reason))
                log.info("left instance %s of deleted pool %s: %s",
                         left.instance_id, left.pool_uid, left.reason)  # fmt: skip
        going = [d for d in decisions if d.action is Action.TERMINATE]
        if not going:
            return []
        ids = [d.instance_id for d in going]
        await asyncio.to_thread(self.terminate, account.credentials, account.region, ids)
        self.swept += len(going)
        self.on_swept(len(going))
        names = {item.instance_id: item.pool for item in found}
        for decision in going:
            await asyncio.to_thread(self._report, decision, names.get(decision.instance_id))
        return going

    def _report(self, decision: Decision, pool: str | None) -> None:
        """In a thread: the Event is posted straight to the API server (events.DirectEvents)."""
        what = f"terminated instance {decision.instance_id}: {decision.reason}"
        log.warning("%s (pool %s)", what, pool or "?")
        namespace, _, name = (pool or "").partition("/")
        if namespace and name:
            self.events.post(_deleted_pool(namespace, name, decision.pool_uid), "Warning",
                             "OrphanSwept", what)  # fmt: skip


def _tagged(item: FleetInstance) -> Tagged:
    return Tagged(
        item.instance_id, item.slot, item.state, item.instance_type, item.zone,
        item.install, item.created, item.retained,
    )  # fmt: skip


def _deleted_pool(namespace: str, name: str, uid: str) -> dict[str, Any]:
    """The Event's object: the deleted Spotpool, by name and uid (the Event lives on in its
    namespace, where `kubectl get events` shows it)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Spotpool",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
    }


def _code(error: Exception) -> str:
    code = getattr(error, "code", None)
    return f"{code}" if code else f"{type(error).__name__}: {error}"
