"""The emulated cloud as a whole: the clock, identifiers, addresses, and the instances' lives."""

import hashlib
import secrets
import string
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from spotpool.emulator.errors import not_found
from spotpool.emulator.iam import DEFAULT_ACCOUNT, Iam, Principal
from spotpool.emulator.instances import GONE, InstanceRecord
from spotpool.emulator.misbehaviour import Misbehaving
from spotpool.emulator.prices import SpotPrices
from spotpool.emulator.store import CloudStore

_ID_ALPHABET = string.ascii_lowercase + string.digits


@dataclass
class Settings:
    boot_seconds: float = 5.0  # PENDING → RUNNING, and every other transition
    reclaim_notice_seconds: float = 0.0  # spot termination-time is announced this long before
    keys: dict[str, str] = field(default_factory=dict)  # SecretId → SecretKey


@dataclass
class Context:
    """One API call: who, where, when."""

    world: "World"
    region: str
    request_id: str
    now: float
    account: str = DEFAULT_ACCOUNT  # where the call lands: accounts see only their own
    principal: Principal | None = None  # who signed it (None: an unsigned STS call)


class World:
    def __init__(
        self, store: CloudStore, settings: Settings, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.prices = SpotPrices()  # spot price per zone x type (set by `serve`, admin routes)
        self.iam = Iam(settings.keys)  # accounts, roles, temporary keys (iam.py)
        # Faults on request (misbehaviour.py); the server gives it its seeded random.
        self.misbehaviour = Misbehaving()
        self._next_due = 0.0  # nothing changes state before this moment
        # Describe calls dominate: keep each instance's API view and each region's live list
        # until something changes them.
        self._views: dict[str, dict[str, Any]] = {}
        self._live: dict[tuple[str, str], list[InstanceRecord]] | None = None

    # -- reading ---------------------------------------------------------------------------
    def advance(self) -> None:
        """Bring every instance's state up to the clock; cheap when nothing is due."""
        now = self.clock()
        if now < self._next_due:
            return
        changed = [
            r
            for r in self.store.instances.values()
            if not r.gone and r.advance(now, self.settings.boot_seconds)
        ]
        if changed:
            self.store.save(*changed)
            self._forget(changed)
        self._recompute_due()

    def _recompute_due(self) -> None:
        due = [
            moment
            for r in self.store.instances.values()
            if not r.gone
            for moment in (r.transition_until, r.reclaim_at)
            if moment is not None
        ]
        self._next_due = min(due, default=float("inf"))

    def live(self, region: str, account: str = DEFAULT_ACCOUNT) -> list[InstanceRecord]:
        """The region's instances of `account` that DescribeInstances shows, oldest first."""
        self.advance()
        if self._live is None:
            self._live = {}
            for r in self.store.instances.values():
                if not r.gone:
                    self._live.setdefault((r.account, r.region), []).append(r)
        return list(self._live.get((account, region), ()))

    def listing(self, region: str, account: str = DEFAULT_ACCOUNT) -> list[InstanceRecord]:
        """What DescribeInstances lists: `live`, unless a listing lag hides the youngest and
        still shows, as they were, the instances that just went (misbehaviour.py)."""
        return self.misbehaviour.listing(self.live(region, account), region, account, self.clock())

    def view(self, record: InstanceRecord) -> dict[str, Any]:
        """The instance as the API shows it (shared: callers must not change it)."""
        if record is not self.store.instances.get(record.instance_id):
            return record.to_api()  # a lagging listing's copy of how it was: never cached
        view = self._views.get(record.instance_id)
        if view is None:
            view = self._views[record.instance_id] = record.to_api()
        return view

    def _forget(self, records: Iterable[InstanceRecord]) -> None:
        for r in records:
            self._views.pop(r.instance_id, None)
        self._live = None

    def find(
        self, region: str, instance_ids: Iterable[str], account: str = DEFAULT_ACCOUNT
    ) -> list[InstanceRecord]:
        """Exactly these instances, or InvalidInstanceId.NotFound naming the missing ones."""
        by_id = {r.instance_id: r for r in self.live(region, account)}
        wanted = list(dict.fromkeys(instance_ids))
        missing = [i for i in wanted if i not in by_id]
        if missing:
            raise not_found(missing)
        return [by_id[i] for i in wanted]

    # -- changing --------------------------------------------------------------------------
    def touch(self, *records: InstanceRecord) -> None:
        """Persist changed instances and take note of their next transition."""
        self.store.save(*records)
        self._forget(records)
        for r in records:
            for moment in (r.transition_until, r.reclaim_at):
                if moment is not None and not r.gone:
                    self._next_due = min(self._next_due, moment)

    def terminate(self, records: list[InstanceRecord], request_id: str, reason: str) -> None:
        now = self.clock()
        for r in records:
            if r.state == "TERMINATING":
                continue  # already on its way out
            self.misbehaviour.departing(r, now)
            r.gone_reason = reason
            r.begin(
                "TerminateInstances",
                "TERMINATING",
                GONE,
                now + self.settings.boot_seconds,
                request_id,
            )
            if reason == "terminated":
                self._return_stock(r)
        self.touch(*records)

    def reclaim(self, records: list[InstanceRecord]) -> None:
        """What the cloud does to a spot instance it wants back: notice, then termination."""
        now = self.clock()
        for r in records:
            self.misbehaviour.departing(r, now + self.settings.reclaim_notice_seconds)
            r.termination_time = now + self.settings.reclaim_notice_seconds
            r.reclaim_at = r.termination_time
        self.touch(*records)
        self.advance()

    def _return_stock(self, record: InstanceRecord) -> None:
        key = (record.zone, record.instance_type)
        if record.spot and key in self.store.capacity:
            self.store.set_capacity(*key, self.store.capacity[key] + 1)

    # -- naming ----------------------------------------------------------------------------
    def new_id(self, prefix: str) -> str:
        while True:
            candidate = prefix + "".join(secrets.choice(_ID_ALPHABET) for _ in range(8))
            if candidate not in self.store.instances:
                return candidate

    def private_ip(self) -> str:
        n = self.store.next_number("private_ip")
        return f"172.16.{n // 250 % 256}.{n % 250 + 2}"

    def public_ip(self) -> str:
        # 198.18.0.0/15 is reserved for benchmarks: never routed, never somebody's machine.
        n = self.store.next_number("public_ip")
        return f"198.{18 + n // 65536 % 2}.{n // 256 % 256}.{n % 256}"


def default_vpc(region: str) -> str:
    return "vpc-" + hashlib.sha256(region.encode()).hexdigest()[:8]


def default_subnet(zone: str) -> str:
    return "subnet-" + hashlib.sha256(zone.encode()).hexdigest()[:8]
