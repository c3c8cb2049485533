"""The last net against leaks: instances of this install and this cluster tagged for a pool that
no longer exists (a late fast-path launch for a deleted pool, a destroy that could not finish, a
replica that wrote after its shard moved) are terminated once their pool has been missing for
the orphan grace — and only when the state backend proves no stack holds them.

Every (key pair, region) a pool of this replica used is remembered, in memory and in the state
backend (engine/leftovers/accounts.py: found again after a restart, for as long as the grace and
a day), and swept every `interval`: the fleet is listed first, the Spotpools of the cluster after
it (a pool exists before anything is created for it, so a uid missing from the later listing is
a deleted pool's — once two listings a grace apart both lack it). Then one pure decision
(engine/leftovers/stray_rules.py `decide_strays`) says what goes; before anything goes, every
stack of the backend and the Retain records are read (engine/leftovers/holdings.py). Each
account is swept on its own (one failing does not stop the others) within a cap of its own (one
tenant's fake strays on its own account cannot use up another's); each termination is checked
against the pool's shard Lease right before it is sent.

`--sweep terminate` (the default) terminates; `report` posts the Event `OrphanFound` and counts
`spotpool_orphans_reported_total` instead; `off` runs no sweep. Each termination is a log line,
`spotpool_orphans_swept_total` and, for a pool this replica served (`remember`), an Event
`OrphanSwept` on the deleted pool, in the namespace it was seen in — never where an instance's
tag says: a tenant writes the tags of its own account's instances.
"""

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from spotpool.api.spec import GROUP, VERSION
from spotpool.api.stackconfig import PoolIdentity, install_tag
from spotpool.engine.leftovers.accounts import AccountRecord
from spotpool.engine.leftovers.holdings import Holdings
from spotpool.engine.leftovers.orphans import Action, Decision, Tagged
from spotpool.engine.leftovers.stray_rules import Fleet, Missing, decide_strays, would_go
from spotpool.engine.tencent.cloud import FleetInstance
from spotpool.engine.tencent.credentials import Credentials
from spotpool_operator.cloud.orphaned_stacks import OrphanedStacks
from spotpool_operator.reporting.events import Events

log = logging.getLogger("spotpool_operator.strays")
KEEP_ACCOUNT = 86400.0  # seconds a key pair is swept after its last pool here, beyond the grace
SAVE_EVERY = 3600.0  # seconds between two writes of one account's record

FleetLister = Callable[[Credentials, str], list[FleetInstance]]
# (credentials, region, instance ids, fence checked right before the send)
Terminator = Callable[[Credentials, str, list[str], Callable[[], None]], None]
# Which of these pool uids (uid -> "namespace/name") are a Spotpool's now (kube.py); None: the
# listing failed or was partial, so every pool counts as alive.
PoolUids = Callable[[Mapping[str, str | None]], set[str] | None]


# Which of these "namespace/name" are a Spotpool now (kube.py); None: not known.
PoolNames = Callable[[Collection[str]], set[str] | None]
_WALL, _STEADY = datetime.now(UTC), time.monotonic()


def _steady_now() -> datetime:
    """The "gone" clock: this process's monotonic time, as a date (a wall clock stepped by NTP
    or a VM's resume must not make a pool missing for a grace in an instant)."""
    return _WALL + timedelta(seconds=time.monotonic() - _STEADY)


class NotServed(Exception):
    """The pool's shard is no longer this replica's: the termination is not sent."""


@dataclass
class Backend:
    """What the sweep asks of the state backend (engine/leftovers): what it holds, and the
    accounts to sweep recorded there."""

    holdings: Callable[[], Holdings | None]
    save_account: Callable[[AccountRecord], None] = lambda record: None
    recorded_accounts: Callable[[float], list[AccountRecord]] = lambda keep: []


@dataclass
class _Account:
    credentials: Credentials
    region: str
    seen: float  # epoch: the last time a pool used it
    label: str  # for logs: the namespace and Secret, or the identity, never a key


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
        backend: Backend,
        cluster_id: str | None = None,
        mode: str = "terminate",
        resolve: Callable[[AccountRecord], Credentials] | None = None,
        on_swept: Callable[[int], None] = lambda count: None,
        on_reported: Callable[[int], None] = lambda count: None,
        cap: int = 100,
        clock: Callable[[], datetime] = lambda: _steady_now(),
        pool_names: PoolNames | None = None,
        install_object: dict[str, Any] | None = None,
    ) -> None:
        self.lister, self.terminate, self.pool_uids = lister, terminate, pool_uids
        self.serves, self.events, self.backend = serves, events, backend
        self.on_swept, self.on_reported, self.resolve = on_swept, on_reported, resolve
        self.install_id, self.cluster_id, self.mode = install_id, cluster_id, mode
        self.grace, self.cap, self.clock = grace, cap, clock
        # Which "namespace/name" are a Spotpool now (a pool re-created under a new uid): its
        # stack must be among what the backend's read found, or the read is doubtful.
        self.pool_names, self.install_object = pool_names, install_object
        self.orphaned = OrphanedStacks(events, install_object)
        self.accounts: dict[tuple[str, str], _Account] = {}
        self.missing = Missing()
        self.swept = 0  # terminated, in all
        self.passes = 0
        self._told: set[tuple[str, str]] = set()  # (instance, reason) left and said so
        self._saved: dict[str, float] = {}  # record key -> when this process last wrote it
        self._recorded: set[str] = set()  # record keys found in the backend and resolved
        self.seen: dict[str, tuple[PoolIdentity, float]] = {}  # pool uid -> the pool, when
        # Why no pass may run now (another live claimant of this identity: cloud/claims.py);
        # asked in a thread right before each pass.
        self.hold: Callable[[], str | None] = lambda: None
        # Why one account may not be swept now (its cloud identity claims unread: cloud_claims).
        self.account_hold: Callable[[Credentials, str], str | None] = lambda c, r: None

    @property
    def interval(self) -> float:
        """A third of the grace (a stray lives at most about 4/3 of it), between 5 s and 5 min."""
        return min(300.0, max(5.0, self.grace / 3))

    def remember(
        self,
        credentials: Credentials,
        region: str,
        record: AccountRecord | None = None,
        pool: PoolIdentity | None = None,
    ) -> None:
        """A pool of this replica uses this key pair and region: sweep it from now on (and,
        with its `record`, after a restart too); the `pool` is one whose leftovers' Events
        may be posted, in its namespace."""
        if pool is not None:
            self.seen[pool.uid] = (pool, time.time())
        key = (credentials.identity_key(), region)  # temporary keys renew; this stays
        label = _label(record) if record else "a pool's inline keys"
        self.accounts[key] = _Account(credentials, region, time.time(), label)
        if record is not None and time.time() - self._saved.get(record.key, 0.0) > SAVE_EVERY:
            self._saved[record.key] = time.time()
            try:
                self.backend.save_account(record)
            except Exception as error:  # the next remember tries again
                self._saved.pop(record.key, None)
                log.info("account record not written: %s", _code(error))

    def forget(self, identities: Collection[str]) -> None:
        """Sweep with these identities no more (their grant was withdrawn); a pool granted them
        again remembers them."""
        for key in [k for k in self.accounts if k[0] in identities]:
            del self.accounts[key]

    async def run(self) -> None:
        """Sweep every `interval` until cancelled; a failed pass is logged and retried."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.sweep()
            except Exception as error:  # the next pass tries again; never a dead loop
                log.warning("sweep of deleted pools' instances failed: %s", _code(error))

    async def sweep(self) -> list[Decision]:
        """One pass over every remembered key pair and region: what was terminated (or, in
        report mode, reported). One account's failure is its own."""
        held = await asyncio.to_thread(self.hold)
        if held is not None:  # a pool is seen missing twice anew once it ends
            self.missing, self.passes = Missing(), self.passes + 1
            log.debug("stray sweep %d: held, nothing swept: %s", self.passes, held)
            return []
        keep = self.grace + KEEP_ACCOUNT
        await self._find_recorded(keep)
        for key in [k for k, a in self.accounts.items() if a.seen < time.time() - keep]:
            del self.accounts[key]
        for uid in [u for u, (_, when) in self.seen.items() if when < time.time() - keep]:
            del self.seen[uid]
        done: list[Decision] = []
        listed: set[str] = set()
        for account in list(self.accounts.values()):
            unproven = self.account_hold(account.credentials, account.region)
            if unproven is not None:  # as a failed listing: its clocks run on
                if (account.label, unproven) not in self._told:  # once a reason
                    self._told.add((account.label, unproven))
                    log.info("sweep of %s in %s held: %s", account.label, account.region, unproven)
                listed |= set(self.missing.since)
                continue
            try:
                done += await self._sweep(account, self.cap, listed)
            except Exception as error:
                log.warning("sweep of %s in %s failed: %s", account.label, account.region,
                            _code(error))  # fmt: skip
                listed |= set(self.missing.since)  # its clocks run on
        self.missing.forget(listed)
        self.passes += 1
        log.debug(
            "stray sweep %d: %d key pair(s) and region(s), %d %s",
            self.passes, len(self.accounts), len(done),
            "reported" if self.mode == "report" else "terminated",
        )  # fmt: skip
        return done

    async def _find_recorded(self, keep: float) -> None:
        """The accounts recorded in the backend (a restart forgot them): resolved once each."""
        if self.resolve is None:
            return
        try:
            records = await asyncio.to_thread(self.backend.recorded_accounts, keep)
        except Exception as error:
            log.info("recorded accounts not read: %s", _code(error))
            return
        for record in records:
            if record.key in self._recorded:
                continue
            try:
                credentials = await asyncio.to_thread(self.resolve, record)
            except Exception as error:  # its Secret gone, say: tried again next pass
                log.info("recorded account %s not usable: %s", _label(record), _code(error))
                continue
            self._recorded.add(record.key)
            key = (credentials.identity_key(), record.region)
            if key not in self.accounts:
                self.accounts[key] = _Account(credentials, record.region, record.seen,
                                              _label(record))  # fmt: skip

    async def _sweep(self, account: _Account, budget: int, listed: set[str]) -> list[Decision]:
        found = await asyncio.to_thread(self.lister, account.credentials, account.region)
        candidates = {  # a served pool's instance of this install: its pool may be gone
            item.pool_uid: item.pool
            for item in found
            # either value: the unmarked one is told apart by its cluster tag (owner_problem),
            # and what is left alone is logged with why
            if item.install in (install_tag(self.install_id), self.install_id)
            and item.pool_uid
            and self.serves(item.pool_uid)
        }
        if not candidates:
            return []
        alive = await asyncio.to_thread(self.pool_uids, candidates)  # after the instances
        now = self.clock()
        self.missing.observe(candidates, alive, now)
        listed |= set(candidates)
        tagged: dict[str, list[Tagged]] = {}
        for item in found:
            tagged.setdefault(item.pool_uid, []).append(_tagged(item))
        fleet = Fleet(
            install_id=self.install_id,
            cluster_id=self.cluster_id,
            missing={u: t for u, t in self.missing.since.items() if u in candidates},
            gone=self.missing.gone(now, timedelta(seconds=self.grace)),
            serves=self.serves,
            cap=max(0, budget),
            terminate=self.mode == "terminate",
        )
        holdings: Holdings | None = None
        if would_go(fleet, tagged):  # the backend decides what is held: read it only then
            holdings = await asyncio.to_thread(self.backend.holdings)
            doubt = await asyncio.to_thread(self._doubt, holdings, candidates)
            fleet = replace(
                fleet,
                held=holdings.instances if holdings else frozenset(),
                kept=holdings.kept if holdings else frozenset(),
                doubt=doubt,
                trusted_since=holdings.since if holdings else None,
            )
        decisions = decide_strays(fleet, tagged)
        if holdings is not None and fleet.held and self.pool_names is not None:
            await asyncio.to_thread(self.orphaned.pass_over, fleet, tagged, holdings.stacks,
                                    candidates, self.pool_names)  # fmt: skip
        for left in (d for d in decisions if d.action is Action.LEAVE):
            if (left.instance_id, left.reason) not in self._told:  # once, not every pass
                self._told.add((left.instance_id, left.reason))
                log.info("left instance %s of deleted pool %s: %s",
                         left.instance_id, left.pool_uid, left.reason)  # fmt: skip
        names = {item.instance_id: item.pool for item in found}  # as tagged: for logs only
        reported = [d for d in decisions if d.action is Action.REPORT]
        fresh = [d for d in reported if (d.instance_id, "report") not in self._told]
        for decision in fresh:
            self._told.add((decision.instance_id, "report"))
            await asyncio.to_thread(self._report, decision, names.get(decision.instance_id))
        if fresh:
            self.on_reported(len(fresh))
        going = [d for d in decisions if d.action is Action.TERMINATE]
        sent: list[Decision] = []
        for uid in sorted({d.pool_uid for d in going}):
            batch = [d for d in going if d.pool_uid == uid]
            ids = [d.instance_id for d in batch]
            # Said before it is sent: a call that fails or hangs still leaves its line.
            log.warning("terminating %d instance(s) of deleted pool %s: %s", len(ids), uid,
                        ", ".join(ids))  # fmt: skip
            try:
                await asyncio.to_thread(
                    self.terminate, account.credentials, account.region, ids, self._fence(uid)
                )
            except NotServed as error:
                log.info("%s", error)
                continue
            except Exception as error:  # it may have taken effect: this account's pass ends
                log.warning("TerminateInstances of %s failed (%s): the next pass looks again",
                            ", ".join(ids), _code(error))  # fmt: skip
                raise  # (the batches before it are audited already)
            sent += batch
            await self._audit(batch, names)  # each batch as soon as it returns
        return sent + reported

    async def _audit(self, batch: list[Decision], names: Mapping[str, str | None]) -> None:
        """A sent batch: counted, and each instance a log line and (a pool served) an Event."""
        self.swept += len(batch)
        self.on_swept(len(batch))
        for decision in batch:
            await asyncio.to_thread(self._report, decision, names.get(decision.instance_id))

    def _doubt(self, holdings: Holdings | None, candidates: Mapping[str, str | None]) -> str | None:
        """Why the backend's read proves nothing unheld (None: it does): not read, doubtful in
        itself, or a deleted pool's name taken by a live pool (re-created) whose stack the
        read did not find. Said once a reason in an Event on the install (its Lease)."""
        why: str | None
        if holdings is None:
            why = "the state backend is not self-managed or could not be read"
        elif holdings.doubt is not None:
            why = holdings.doubt
        else:
            why = self._unfound_stacks(holdings, candidates)
        if why is not None and ("doubt", why) not in self._told:
            self._told.add(("doubt", why))
            log.warning("the sweep reports instead of terminating: %s", why)
            if self.install_object is not None:
                what = f"deleted pools' instances are reported, not terminated: {why}"
                self.events.post(self.install_object, "Warning", "SweepReportsOnly", what)
        return why

    def _unfound_stacks(
        self, holdings: Holdings, candidates: Mapping[str, str | None]
    ) -> str | None:
        named = {n for n in candidates.values() if n and "/" in n}
        if self.pool_names is None or not named:
            return None
        live = self.pool_names(named)
        if live is None:
            return "the cluster's pools could not be listed by name"
        unfound = sorted(n for n in live if n.replace("/", ".", 1) not in holdings.stacks)
        if not unfound:
            return None
        return (
            f"pool {', '.join(unfound)} exists again (under a new uid) and the state backend's "
            "read found no stack of it (a layout, URL or prefix this read does not see?)"
        )

    def _fence(self, uid: str) -> Callable[[], None]:
        """Checked right before the termination is sent: the pool's shard still this
        replica's (its Lease held)."""

        def check() -> None:
            if not self.serves(uid):
                raise NotServed(f"pool {uid}'s shard is no longer this replica's: not swept")

        return check

    def _report(self, decision: Decision, tagged: str | None) -> None:
        """In a thread: the Event is posted straight to the API server (events.DirectEvents),
        only for a pool this replica served, in the namespace it served it in."""
        if decision.action is Action.REPORT:
            what = f"would terminate instance {decision.instance_id}: {decision.reason}"
            reason = "OrphanFound"
        else:
            what = f"terminated instance {decision.instance_id}: {decision.reason}"
            reason = "OrphanSwept"
        seen = self.seen.get(decision.pool_uid)
        log.warning("%s (pool %s, tagged %s)%s", what, decision.pool_uid, tagged or "?",
                    "" if seen else ": not a pool this install served, no Event")  # fmt: skip
        if seen is not None:
            pool = seen[0]
            self.events.post(_deleted_pool(pool.namespace, pool.name, pool.uid), "Warning",
                             reason, what)  # fmt: skip


def _tagged(item: FleetInstance) -> Tagged:
    return Tagged(
        item.instance_id, item.slot, item.state, item.instance_type, item.zone,
        item.install, item.created, item.retained, item.cluster,
    )  # fmt: skip


def _label(record: AccountRecord) -> str:
    ref = record.source.get("credentialsSecretRef") or {}
    name = ref.get("name") if isinstance(ref, dict) else None
    where = f"Secret {record.namespace}/{name}" if name else "the operator's identity"
    role = record.source.get("assumeRole") or {}
    return where + (f" as {role.get('roleArn')}" if isinstance(role, dict) and role else "")


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
