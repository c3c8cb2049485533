"""The fleet probe: per (key pair, region), every instance Spotpool manages (the pool-uid tag)
looked at for all pools at once; pools only read its result.

Each pool registers the instances its status lists and is told the moment one of them is gone
or going (TERMINATING, SHUTDOWN, LAUNCH_FAILED), and which of those slots another live instance
of the pool already holds (a run cut short made it, the status does not list it yet). A fleet
of one page (≤ 100 instances) is swept whole every tick: one DescribeInstances. A larger fleet
is first *counted* (one call with a state filter, whatever its size) and swept page by page only
when the count moved or a pool's instances changed since the last sweep, so 2,000 idle
instances cost one call a tick, not 20.
The tick comes from an API budget, not from the pools: max(min_tick, √pages / budget) seconds,
so a small fleet is looked at every second and 2,000 instances every 4.5 s (13 calls a minute
at the default budget). The budget is per group, as the cloud's limits are per account and
region: pools spread over four accounts are looked at as often as one account's, each group on
its own schedule, the groups due at once looked at together. Calls not spent while a group is
quiet are saved, up to one sweep of it: the sweep a storm calls for goes at once, and the
pauses after it pay it back. A throttled or failed look backs off; it never turns into anything
more expensive. Blind spot: a loss and an unrelated creation by another writer between two
counts keep the count equal; the next sweep (any pool's change) or the pool's own timer finds
it.
"""

import asyncio
import logging
import math
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from spotpool.engine.leftovers.recovery import GONE_STATES
from spotpool.engine.tencent.cloud import COUNTED_STATES, FleetInstance
from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.recent_writes import RECENT

log = logging.getLogger("spotpool_operator.fleet")
PAGE = 100  # DescribeInstances returns at most 100 instances a call
# Lists every instance tagged for any pool on a key pair in a region (engine/tencent/cloud.py).
FleetLister = Callable[[Credentials, str], list[FleetInstance]]
# Counts those in a live state, in one call (engine/tencent/cloud.py: count_fleet).
FleetCounter = Callable[[Credentials, str], int]
Notify = Callable[[set[int]], None]


@dataclass
class _Watch:
    expected: dict[int, str]  # slot -> instance id the pool's status lists
    notify: Notify  # called with the gone slots
    since: float  # monotonic time `expected` was set: older sweeps say nothing about it
    held: Notify | None = None  # called with the gone slots another live instance holds


@dataclass
class _Group:
    credentials: Credentials
    region: str
    watches: dict[str, _Watch] = field(default_factory=dict)  # pool uid -> watch
    instances: int = 0  # listed by the last sweep, in any state
    counted: int | None = None  # live ones at the last sweep: what a count is compared with
    changed: bool = True  # a pool's instances changed since the last sweep: sweep, don't count
    verified: float = 0.0  # monotonic time of the last look that found nothing unreported
    failures: int = 0  # failed looks in a row
    failed_at: float = 0.0  # monotonic time of the last failed look
    # Calls saved up while the group was quiet (at most one sweep of it and a count), so the
    # sweep a reclaim calls for goes at once instead of after the last one's pause.
    saved: float = 0.0
    saved_at: float = field(default_factory=time.monotonic)
    due: float = 0.0  # monotonic time of its next look
    calls: int = 0  # DescribeInstances calls its looks made

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.instances / PAGE))


class ProbeSettings(BaseModel):
    budget: float = Field(
        1.0,
        ge=0,
        description="DescribeInstances calls a second per key pair (account) and region (of 40/s).",
    )
    min_tick: float = Field(1.0, gt=0, description="Never look more often than this.")
    max_backoff: float = Field(60.0, gt=0, description="Longest pause after failed looks.")


class FleetProbe:
    def __init__(
        self,
        lister: FleetLister,
        settings: ProbeSettings | None = None,
        counter: FleetCounter | None = None,
    ) -> None:
        self.lister = lister
        self.counter = counter  # None: every look is a whole sweep
        self.settings = settings or ProbeSettings()
        self._groups: dict[tuple[str, str, str], _Group] = {}
        self._group_of: dict[str, tuple[str, str, str]] = {}
        self.sweeps = 0
        self.counts = 0
        self.calls = 0  # DescribeInstances calls, in all
        self.failures = 0

    # --- what pools do ---------------------------------------------------------------------

    def watch(
        self, uid: str, credentials: Credentials, region: str, expected: Mapping[int, str],
        notify: Notify, held: Notify | None = None,
    ) -> None:  # fmt: skip
        """Watch the pool's instances (slot -> id) from now on, replacing any earlier watch.
        `held` is told first which gone slots another live instance of the pool holds."""
        self.unwatch(uid)
        # One group per identity and region: temporary keys renew, the identity stays.
        key = (credentials.identity_key(), "", region)
        group = self._groups.setdefault(key, _Group(credentials, region))
        group.credentials = credentials
        group.watches[uid] = _Watch(dict(expected), notify, time.monotonic(), held)
        group.changed = True
        self._group_of[uid] = key

    def unwatch(self, uid: str) -> None:
        key = self._group_of.pop(uid, None)
        group = self._groups.get(key) if key else None
        if group is not None:
            group.watches.pop(uid, None)
            if not group.watches:
                del self._groups[key]  # type: ignore[arg-type]

    def forget_identities(self, identities: Collection[str]) -> list[str]:
        """Watch no pool of these identities any more (their grant was withdrawn): the uids."""
        uids = [uid for uid, key in self._group_of.items() if key[0] in identities]
        for uid in uids:
            self.unwatch(uid)
        return uids

    def vouches_for(self, uid: str, within: float) -> bool:
        """True when the probe looked at the pool's instances in the last `within` seconds and
        everything gone was already reported: the pool's timer need not ask the cloud itself."""
        key = self._group_of.get(uid)
        group = self._groups.get(key) if key else None
        return group is not None and time.monotonic() - group.verified <= within

    # --- the loop --------------------------------------------------------------------------

    def tick(self, group: _Group) -> float:
        """Seconds between a group's looks: √pages / budget, at least min_tick. A look at a
        large fleet costs one call (a count), so the budget alone would look as often as at a
        small one; the square root keeps a 2,000-instance fleet within 20 calls a minute while
        a reclaim is still seen within seconds."""
        return max(self.settings.min_tick, math.sqrt(group.pages) / self.settings.budget)

    async def run(self) -> None:
        """Look until cancelled: every group whose turn came, together; a look that spent more
        calls than its group saved up waits until they are paid back (the budget holds on
        average), a failed one backs off. Wakes at least every min_tick for new groups."""
        while True:
            now = time.monotonic()
            due = [(key, g) for key, g in list(self._groups.items()) if g.due <= now]
            await asyncio.gather(*(self._turn(key, group) for key, group in due))
            soonest = min((g.due for g in self._groups.values()), default=math.inf)
            wait = min(self.settings.min_tick, soonest - time.monotonic())
            await asyncio.sleep(max(0.0, wait))

    async def _turn(self, key: tuple[str, str, str], group: _Group) -> None:
        started, calls = time.monotonic(), group.calls
        await self.look(key, group)
        owed = self.pay(group, group.calls - calls)
        group.due = started + max(self.tick(group), owed) + self.backoff(group.failures, group)

    def pay(self, group: _Group, calls: int, now: float | None = None) -> float:
        """Take `calls` from the calls the group saved at `budget` a second (at most one sweep
        of it and a count); the seconds until what is owed is paid back (0: nothing owed)."""
        now = time.monotonic() if now is None else now
        budget = self.settings.budget
        most = group.pages + 1
        group.saved = min(most, group.saved + (now - group.saved_at) * budget) - calls
        group.saved_at = now
        return max(0.0, -group.saved / budget)

    def backoff(self, failures: int, group: _Group | None = None) -> float:
        """Pause after `failures` failed looks in a row: two ticks (of `group`, or of a
        one-page one), doubling, capped."""
        if failures <= 0:
            return 0.0
        tick = self.tick(group) if group is not None else self.settings.min_tick
        doubled = 2 * tick * 2.0 ** min(failures - 1, 16)
        return min(self.settings.max_backoff, doubled)

    def failing(self, uid: str) -> float:
        """Seconds the pool's group is still backing off after failed looks (0: it is not).
        Pools wait as long instead of asking the cloud themselves, or refreshing: a thousand
        pools must not turn one failing look into a thousand calls or Pulumi runs."""
        key = self._group_of.get(uid)
        group = self._groups.get(key) if key else None
        if group is None or not group.failures:
            return 0.0
        backoff = self.backoff(group.failures, group)
        return max(0.0, group.failed_at + backoff - time.monotonic())

    async def look(self, key: tuple[str, str, str], group: _Group) -> bool:
        """Count when that says enough, sweep otherwise. False when the cloud did not answer."""
        if self.counter is None or group.pages == 1 or group.changed or group.counted is None:
            return await self.sweep(key, group)
        started = time.monotonic()
        try:
            counted = await asyncio.to_thread(self.counter, group.credentials, group.region)
        except Exception as error:
            return self._failed(group, error)
        self.counts += 1
        self.calls += 1
        group.calls += 1
        if counted != group.counted or group.changed:
            return await self.sweep(key, group)
        group.verified, group.failures = started, 0
        return True

    async def sweep(self, key: tuple[str, str, str], group: _Group) -> bool:
        started = time.monotonic()
        group.changed = False  # a watch set from now on asks for the next sweep again
        try:
            found = await asyncio.to_thread(self.lister, group.credentials, group.region)
        except Exception as error:
            group.changed = True
            return self._failed(group, error)
        self.sweeps += 1
        pages = max(1, math.ceil(len(found) / PAGE))
        self.calls += pages
        group.calls += pages
        group.instances = len(found)
        group.counted = sum(1 for item in found if item.state in COUNTED_STATES)
        alive: dict[str, set[str]] = {}
        slots: dict[str, dict[int | None, set[str]]] = {}  # pool uid -> slot -> live ids
        for item in found:
            if item.state not in GONE_STATES:
                alive.setdefault(item.pool_uid, set()).add(item.instance_id)
                slots.setdefault(item.pool_uid, {}).setdefault(item.slot, set()).add(
                    item.instance_id
                )
        for uid, watch in list(group.watches.items()):
            if watch.since > started:
                continue  # the pool's instances changed while this sweep ran
            live = alive.get(uid, set())
            # A launch the listing has not caught up with is not gone (recent_writes.py).
            missing = {s: i for s, i in watch.expected.items() if i not in live}
            unlisted = RECENT.unlisted(missing.values())
            gone = {slot for slot, instance in missing.items() if instance not in unlisted}
            if gone:
                held = {s for s in gone if slots.get(uid, {}).get(s, set()) - {watch.expected[s]}}
                for slot in gone:  # tell once per instance
                    watch.expected.pop(slot)
                if held and watch.held is not None:
                    watch.held(held)
                watch.notify(gone)
        group.verified, group.failures = started, 0
        return True

    def _failed(self, group: _Group, error: Exception) -> bool:
        self.failures += 1
        group.failures += 1
        group.failed_at = time.monotonic()
        log.warning("fleet probe of %s failed: %s", group.region, _code(error))
        return False


def _code(error: Exception) -> str:
    code = getattr(error, "code", None)
    return f"{code}" if code else type(error).__name__
