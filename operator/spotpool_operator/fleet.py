"""The fleet probe: one paginated DescribeInstances sweep per tick per (key pair, region) over
every instance Spotpool manages (the pool-uid tag), shared by all pools on those keys.

Pools only read its result: each registers the instances its status lists, and is told the
moment one of them is gone or going (TERMINATING, SHUTDOWN, LAUNCH_FAILED). The tick comes
from an API budget, not from the pools: a sweep costs one call per 100 instances, so a small
fleet is looked at every second or so and a large one as often as the budget allows. A
throttled or failed sweep backs off; it never turns into anything more expensive.
"""

import asyncio
import hashlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from spotpool.engine.cloud import FleetInstance
from spotpool.engine.credentials import Credentials
from spotpool.engine.recovery import GONE_STATES

log = logging.getLogger("spotpool_operator.fleet")
PAGE = 100  # DescribeInstances returns at most 100 instances a call
# Lists every instance tagged for any pool on a key pair in a region (engine/cloud.py).
FleetLister = Callable[[Credentials, str], list[FleetInstance]]
Notify = Callable[[set[int]], None]


@dataclass
class _Watch:
    expected: dict[int, str]  # slot -> instance id the pool's status lists
    notify: Notify  # called with the gone slots
    since: float  # monotonic time `expected` was set: older sweeps say nothing about it


@dataclass
class _Group:
    credentials: Credentials
    region: str
    watches: dict[str, _Watch] = field(default_factory=dict)  # pool uid -> watch
    instances: int = 0  # seen by the last sweep


class ProbeSettings(BaseModel):
    budget: float = Field(
        1.0, ge=0, description="DescribeInstances calls a second for all sweeps (of 40/s)."
    )
    min_tick: float = Field(1.0, gt=0, description="Never sweep more often than this.")
    max_backoff: float = Field(60.0, gt=0, description="Longest pause after failed sweeps.")


class FleetProbe:
    def __init__(self, lister: FleetLister, settings: ProbeSettings | None = None) -> None:
        self.lister = lister
        self.settings = settings or ProbeSettings()
        self._groups: dict[tuple[str, str, str], _Group] = {}
        self._group_of: dict[str, tuple[str, str, str]] = {}
        self.sweeps = 0
        self.calls = 0  # DescribeInstances pages asked for, in all
        self.failures = 0

    # --- what pools do ---------------------------------------------------------------------

    def watch(
        self, uid: str, credentials: Credentials, region: str, expected: Mapping[int, str],
        notify: Notify,
    ) -> None:  # fmt: skip
        """Watch the pool's instances (slot -> id) from now on, replacing any earlier watch."""
        self.unwatch(uid)
        key = (
            credentials.secret_id.get_secret_value(),
            hashlib.sha256(credentials.secret_key.get_secret_value().encode()).hexdigest(),
            region,
        )
        group = self._groups.setdefault(key, _Group(credentials, region))
        group.credentials = credentials
        group.watches[uid] = _Watch(dict(expected), notify, time.monotonic())
        self._group_of[uid] = key

    def unwatch(self, uid: str) -> None:
        key = self._group_of.pop(uid, None)
        group = self._groups.get(key) if key else None
        if group is not None:
            group.watches.pop(uid, None)
            if not group.watches:
                del self._groups[key]  # type: ignore[arg-type]

    # --- the loop --------------------------------------------------------------------------

    def tick(self) -> float:
        """Seconds between sweeps: all groups' pages within the budget."""
        pages = sum(max(1, math.ceil(g.instances / PAGE)) for g in self._groups.values())
        return max(self.settings.min_tick, pages / self.settings.budget)

    async def run(self) -> None:
        """Sweep until cancelled."""
        backoff = 0.0
        while True:
            started = time.monotonic()
            failed = False
            for key, group in list(self._groups.items()):
                if not await self.sweep(key, group):
                    failed = True
            if failed:
                backoff = min(self.settings.max_backoff, max(2 * backoff, 2 * self.tick()))
            else:
                backoff = 0.0
            await asyncio.sleep(max(0.0, self.tick() + backoff - (time.monotonic() - started)))

    async def sweep(self, key: tuple[str, str, str], group: _Group) -> bool:
        started = time.monotonic()
        try:
            found = await asyncio.to_thread(self.lister, group.credentials, group.region)
        except Exception as error:  # throttled or failing: back off, the next sweep retries
            self.failures += 1
            log.warning("fleet probe of %s failed: %s", group.region, _code(error))
            return False
        self.sweeps += 1
        self.calls += max(1, math.ceil(len(found) / PAGE))
        group.instances = len(found)
        alive: dict[str, set[str]] = {}
        for item in found:
            if item.state not in GONE_STATES:
                alive.setdefault(item.pool_uid, set()).add(item.instance_id)
        for uid, watch in list(group.watches.items()):
            if watch.since > started:
                continue  # the pool's instances changed while this sweep ran
            live = alive.get(uid, set())
            gone = {slot for slot, instance in watch.expected.items() if instance not in live}
            if gone:
                for slot in gone:  # tell once per instance
                    watch.expected.pop(slot)
                watch.notify(gone)
        return True


def _code(error: Exception) -> str:
    code = getattr(error, "code", None)
    return f"{code}" if code else type(error).__name__
