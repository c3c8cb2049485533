"""The operator's interruption learner: every reclaim and termination notice it sees, and every
instance-hour its spot instances run, per (account, region, zone, instance type), decayed with a
half-life (spotpool.api.interruptions), kept in a ConfigMap of the install's namespace.

Why a ConfigMap: a restart (or a replica on another node) finds it where it finds its Lease,
with no new service; it is small (one line per offering a replica ran in); and its
resourceVersion makes every write a compare-and-swap. Each replica writes only its own data key
(its pod name), and readers sum all of them: two replicas writing at once never lose each
other's counts (a conflict re-reads and writes the replica's key again). A replica restarted
under the same name takes its key back from the ConfigMap first; a replaced pod starts a key of
its own while the old one still counts, decays, and is dropped once negligible.
"""

import asyncio
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from pydantic import BaseModel, Field, ValidationError

from spotpool.api.interruptions import (
    Learned,
    OfferingKey,
    Tally,
    decode_key,
    encode_key,
    summed,
)

log = logging.getLogger("spotpool_operator.interruptions")
WRITER_PREFIX = "writer."  # data keys: writer.<pod name>
SEEN_INSTANCES = 10_000  # instance ids remembered so a notice and its reclaim count once
DROP_AFTER_HALF_LIVES = 20  # a writer silent this long holds < 1e-6 of its counts


class LearnerSettings(BaseModel):
    half_life: float = Field(
        6 * 3600.0, gt=0, description="Seconds after which a seen interruption counts half."
    )
    sync_seconds: float = Field(
        30.0, gt=0, description="How often run hours are added and the ConfigMap written."
    )


Writers = dict[str, dict[OfferingKey, Tally]]


class Store(Protocol):
    def load(self) -> Writers: ...

    def save(self, writer: str, tallies: Mapping[OfferingKey, Tally], drop: Iterable[str]) -> None:
        """Write `writer`'s tallies (only that key) and drop the `drop` writers' keys."""
        ...


class MemoryStore:
    """A store in memory (tests; an operator run with no Kubernetes API to keep it)."""

    def __init__(self) -> None:
        self.writers: Writers = {}

    def load(self) -> Writers:
        return {w: dict(t) for w, t in self.writers.items()}

    def save(self, writer: str, tallies: Mapping[OfferingKey, Tally], drop: Iterable[str]) -> None:
        for name in drop:
            self.writers.pop(name, None)
        self.writers[writer] = dict(tallies)


class ConfigMapStore:
    """The tallies in a ConfigMap: one data key per writer, JSON {offering: tally}; every write
    carries the resourceVersion it read (a conflict reads again)."""

    def __init__(self, core: Any, namespace: str, name: str, attempts: int = 8) -> None:
        self.core, self.namespace, self.name, self.attempts = core, namespace, name, attempts

    def _read(self) -> Any | None:
        import kubernetes

        try:
            return self.core.read_namespaced_config_map(self.name, self.namespace)
        except kubernetes.client.ApiException as error:
            if error.status == 404:
                return None
            raise

    def load(self) -> Writers:
        found = self._read()
        return parse(found.data or {}) if found is not None else {}

    def save(self, writer: str, tallies: Mapping[OfferingKey, Tally], drop: Iterable[str]) -> None:
        import kubernetes

        own = WRITER_PREFIX + writer
        body = dump(tallies)
        for _ in range(self.attempts):
            found = self._read()
            try:
                if found is None:
                    self.core.create_namespaced_config_map(
                        self.namespace,
                        {
                            "metadata": {
                                "name": self.name,
                                "labels": {"app.kubernetes.io/part-of": "spotpool"},
                            },
                            "data": {own: body},
                        },
                    )
                    return
                data = dict(found.data or {})
                for name in drop:
                    data.pop(WRITER_PREFIX + name, None)
                data[own] = body
                found.data = data
                # replace, not patch: the resourceVersion read makes it a compare-and-swap
                self.core.replace_namespaced_config_map(self.name, self.namespace, found)
                return
            except kubernetes.client.ApiException as error:
                if error.status not in (409, 404):  # 409: another writer first; read again
                    raise
        raise RuntimeError(f"ConfigMap {self.namespace}/{self.name}: too many write conflicts")


def dump(tallies: Mapping[OfferingKey, Tally]) -> str:
    return json.dumps(
        {encode_key(k): t.model_dump() for k, t in sorted(tallies.items())}, sort_keys=True
    )


def parse(data: Mapping[str, str]) -> Writers:
    """The writers' tallies from ConfigMap data; a key or a line it cannot read is skipped."""
    writers: Writers = {}
    for name, text in data.items():
        if not name.startswith(WRITER_PREFIX):
            continue
        try:
            raw = json.loads(text)
        except ValueError:
            log.warning("interruption counts of %s unreadable: skipped", name)
            continue
        tallies: dict[OfferingKey, Tally] = {}
        for encoded, value in raw.items() if isinstance(raw, dict) else ():
            key = decode_key(encoded)
            try:
                if key is not None:
                    tallies[key] = Tally.model_validate(value)
            except ValidationError:
                continue
        writers[name.removeprefix(WRITER_PREFIX)] = tallies
    return writers


class Learner:
    """What this replica saw (its own tallies) and what every replica saw (the sum)."""

    def __init__(
        self,
        store: Store,
        writer: str,
        settings: LearnerSettings | None = None,
        clock: Callable[[], float] = time.time,
        on_sync: Callable[[dict[OfferingKey, Learned]], None] | None = None,
    ) -> None:
        self.store, self.writer = store, writer
        self.on_sync = on_sync  # e.g. the metrics of every offering's learned rate
        self.settings = settings or LearnerSettings()
        self.clock = clock
        self._lock = threading.Lock()
        self._own: dict[OfferingKey, Tally] = {}
        self._others: Writers = {}
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._loaded = False

    @property
    def half_life(self) -> float:
        return self.settings.half_life

    def load(self) -> None:
        """Read every writer's tallies; this writer's own (a restart under the same name) are
        taken back and added to what it counted meanwhile."""
        writers = self.store.load()
        with self._lock:
            stored = writers.pop(self.writer, {})
            if not self._loaded:
                now = self.clock()
                for key, tally in stored.items():
                    mine = self._own.get(key, Tally(at=now))
                    self._own[key] = tally.plus(
                        mine.interruptions, mine.hours, max(now, tally.at), self.half_life
                    )
                self._loaded = True
            self._others = writers

    def interrupted(self, key: OfferingKey, instance_id: str | None = None) -> bool:
        """One interruption seen (a reclaim or a notice): counted once per instance id.
        False when this instance was already counted."""
        now = self.clock()
        with self._lock:
            if instance_id is not None:
                if instance_id in self._seen:
                    return False
                self._seen[instance_id] = None
                while len(self._seen) > SEEN_INSTANCES:
                    self._seen.popitem(last=False)
            self._own[key] = self._own.get(key, Tally(at=now)).plus(1, 0, now, self.half_life)
        return True

    def ran(self, hours: Mapping[OfferingKey, float]) -> None:
        """Instance-hours run per offering since the last call."""
        now = self.clock()
        with self._lock:
            for key, value in hours.items():
                if value > 0:
                    tally = self._own.get(key, Tally(at=now))
                    self._own[key] = tally.plus(0, value, now, self.half_life)

    def learned(self) -> dict[OfferingKey, Learned]:
        with self._lock:
            writers = [self._own, *self._others.values()]
            return summed(writers, self.clock(), self.half_life)

    def of(self, account: str, region: str) -> dict[tuple[str, str], Learned]:
        """(zone, type) -> what was learned there, for one account and region."""
        return {
            (zone, kind): learned
            for (acct, reg, zone, kind), learned in self.learned().items()
            if acct == account and reg == region
        }

    def sync(self) -> None:
        """Write this writer's tallies (and drop long-silent writers), then read the others'."""
        if not self._loaded:
            self.load()
        now = self.clock()
        with self._lock:
            own = {k: t.decayed(now, self.half_life) for k, t in self._own.items()}
            own = {k: t for k, t in own.items() if not t.negligible()}
            self._own = own
            horizon = now - DROP_AFTER_HALF_LIVES * self.half_life
            silent = [
                name
                for name, tallies in self._others.items()
                if all(t.at < horizon for t in tallies.values())
            ]
        self.store.save(self.writer, own, silent)
        self.load()
        if self.on_sync is not None:
            self.on_sync(self.learned())


class HourMeter:
    """Turns "these many spot instances run now per offering" into instance-hours between
    two looks (each look counts the span since the one before with the counts it sees)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._last: float | None = None

    def hours(self, running: Mapping[OfferingKey, int]) -> dict[OfferingKey, float]:
        now = self.clock()
        last, self._last = self._last, now
        if last is None:
            return {}
        span = (now - last) / 3600
        return {key: count * span for key, count in running.items()}


async def keep_learning(learner: Learner, running: Callable[[], Mapping[OfferingKey, int]]) -> None:
    """Every sync period: add the hours the operator's spot instances ran, write, read."""
    meter = HourMeter()
    meter.hours(running())
    while True:
        await asyncio.sleep(learner.settings.sync_seconds)
        try:
            learner.ran(meter.hours(running()))
            await asyncio.to_thread(learner.sync)
        except Exception as error:  # the next period tries again; counts stay in memory
            log.warning("writing the interruption counts failed: %s", type(error).__name__)
