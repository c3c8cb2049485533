"""The operator's Kubernetes Lease (coordination.k8s.io/v1): who may write the stacks.

One Lease names the writer. A replica acquires it when it is free (never held, released, or
not seen to change for its duration), renews it every third of the duration, and releases it
on shutdown. The Lease also records the hostnames of every holder so far (an annotation), so
a later holder can prove a stack lock's owner gone: a lock taken by an earlier holder belongs
to a process that lost or gave up the right to write (engine/fencing/ownership.py). While this
process does not hold the Lease it runs no operation; the moment it stops holding it, `on_lost` is
called to cancel what is running.

No two nodes' clocks are ever compared (as client-go's leader election): another holder's
Lease expires when this process has seen it unchanged for its duration; this process holds
its own Lease for two thirds of the duration after it *sent* its last successful renewal —
the renewal reached the API server after that, and anyone else saw it later still, so its
runs are stopped a third of the duration before anyone may take over. Both are timed on this
process's `lease_clock` (CLOCK_BOOTTIME), which counts while a VM is paused or suspended: a
replica that wakes from a pause longer than its margin no longer holds. The times written
into the Lease (`renewTime`, `acquireTime`) are for people (`spotpool shards`); nothing
decides on them.

A Lease that slipped (not renewed within two thirds of the duration: no new write is made under
it) is not lost yet: until five sixths of the duration after the last renewal sent (`kill_at`),
no one else can have taken it, so a renewal that comes late, over the Lease as this process
last wrote it (the same holder, no transition in between), takes it back with the runs under
way. Past `kill_at` the runs are stopped, a sixth of the duration before anyone may take over.
Renewals are due every sixth of the duration (`renewal_due`): half of the duration ahead of a
slip, retried at once when one fails.
"""

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import kubernetes

log = logging.getLogger("spotpool_operator.lease")
HOLDERS = "spotpool.devops.jokerbai.com/holders"  # JSON list of hostnames, oldest first
KEEP_HOLDERS = 32
# Renewals get a thread of their own: in asyncio's shared pool they would queue behind the
# pools' work (a thousand pools' Secret reads and checkpoint reads at a restart) and the
# Lease would slip away from a busy but healthy operator.
LEASE_THREAD = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="lease")
# A node's clock set wrong, for the tests that show nothing decides on wall clocks (seconds);
# the file's offset may change while the process runs (a clock that jumps: bench/nemesis.py).
CLOCK_OFFSET_ENV = "SPOTPOOL_CLOCK_OFFSET"
CLOCK_OFFSET_FILE_ENV = "SPOTPOOL_CLOCK_OFFSET_FILE"
# CLOCK_MONOTONIC stands still while a VM is paused or suspended: a holder timed on it would
# wake up believing it still holds a Lease another replica took meanwhile. BOOTTIME counts.
_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


def lease_clock() -> float:
    """Seconds on a clock that never goes back and keeps counting while the machine (or VM)
    is suspended or paused: CLOCK_BOOTTIME on Linux, the monotonic clock elsewhere."""
    if _BOOTTIME is None:
        return time.monotonic()
    return time.clock_gettime(_BOOTTIME)


def wall_clock() -> datetime:
    """This node's wall clock (what the Lease's times are written in), offset as the
    environment says (a test of a node whose clock runs ahead)."""
    offset = float(os.environ.get(CLOCK_OFFSET_ENV) or 0)
    if jumps := os.environ.get(CLOCK_OFFSET_FILE_ENV):
        with contextlib.suppress(OSError, ValueError):
            offset += float(Path(jumps).read_text().strip() or 0)
    return datetime.now(UTC) + timedelta(seconds=offset)


RENEW_EVERY = 1 / 6  # of the duration: a renewal is due this long after the last one sent
HELD_FOR = 2 / 3  # of the duration after the last renewal sent: writes are made under it
KILL_AT = 5 / 6  # of the duration after the last renewal sent: a slipped Lease's runs stopped


def request_timeout(duration: float) -> float:
    """A Lease request's timeout: short, so that one slow call cannot hold a round past the
    point where the Lease slips (a sixth of the duration, 1-5 s)."""
    return min(5.0, max(1.0, duration / 6))


class Observed:
    """When this process last saw a Lease's record change (client-go's observedTime)."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self.monotonic = monotonic
        self.record: tuple[Any, ...] | None = None
        self.at = 0.0

    def see(self, lease: Any) -> None:
        spec = lease.spec
        record = (
            spec.holder_identity or "",
            spec.renew_time,
            spec.acquire_time,
            spec.lease_transitions,
            spec.lease_duration_seconds,
        )
        if record != self.record:
            self.record, self.at = record, self.monotonic()

    def holder(self, default_duration: float) -> str | None:
        """The holder while its Lease lasts (changed within its duration), else None."""
        if self.record is None or not self.record[0]:
            return None
        duration = self.record[4] or default_duration
        return str(self.record[0]) if self.monotonic() <= self.at + duration else None


class OperatorLease:
    """Holds one Lease; implements the engine's LeaseView."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        name: str,
        duration: float = 30.0,
        hostname: str | None = None,
        clock: Callable[[], datetime] = wall_clock,
        monotonic: Callable[[], float] = lease_clock,
    ) -> None:
        self.api = api  # a kubernetes.client.CoordinationV1Api
        self.namespace, self.name = namespace, name
        self.duration = duration
        self.timeout = request_timeout(duration)
        self.hostname = hostname or socket.gethostname()
        self.identity = f"{self.hostname}_{uuid.uuid4().hex[:8]}"
        self.clock = clock
        self.monotonic = monotonic
        self.observed = Observed(monotonic)
        self._acquired: datetime | None = None  # wall clock, this node's (same-host lock rule)
        self._renewed: float | None = None  # monotonic: when the last good renewal was sent
        self._earlier: frozenset[str] = frozenset()
        self._last: Any = None  # the Lease as this process last wrote it (its resourceVersion)
        self.transitions = 0  # the Lease's leaseTransitions when this process acquired it
        self.held_event = asyncio.Event()
        self.on_lost: list[Callable[[], None]] = []

    # --- LeaseView ---------------------------------------------------------------------------

    def held(self) -> bool:
        """Held, and renewed recently enough that no one else can have taken it over: two
        thirds of the duration after the last successful renewal was sent."""
        return self.held_until() > self.monotonic()

    def held_until(self) -> float:
        """The monotonic time this process stops holding the Lease unless it renews it."""
        renewed = self._renewed
        return float("-inf") if renewed is None else renewed + self.duration * HELD_FOR

    def kill_at(self) -> float:
        """The monotonic time a slipped Lease's runs must be stopped by unless a renewal takes
        it back: a sixth of the duration before anyone else may take the Lease over."""
        renewed = self._renewed
        return float("-inf") if renewed is None else renewed + self.duration * KILL_AT

    def ours(self) -> bool:
        """Held, or slipped but not past `kill_at`: a renewal may still take it back."""
        return self.kill_at() > self.monotonic()

    def renewal_due(self) -> bool:
        """Ours, and a sixth of the duration since the last renewal was sent."""
        renewed = self._renewed
        return (
            renewed is not None
            and self.ours()
            and self.monotonic() >= renewed + self.duration * RENEW_EVERY
        )

    def acquired_at(self) -> datetime:
        return self._acquired or datetime.max.replace(tzinfo=UTC)

    @property
    def uid(self) -> str:
        """The Lease object's uid as this process last wrote it: a recreated Lease restarts
        its transition count, so tokens compare only within one uid."""
        last = self._last
        return str(getattr(getattr(last, "metadata", None), "uid", "") or "")

    def earlier_holders(self) -> frozenset[str]:
        return self._earlier

    def assume(
        self, earlier: frozenset[str] = frozenset(), acquired: datetime | None = None
    ) -> None:
        """Hold the Lease as if just acquired (tests of what follows, without an API server)."""
        self._acquired = acquired or self.clock()
        self._renewed = self.monotonic()
        self._earlier = earlier

    # --- acquiring and renewing --------------------------------------------------------------

    def step(self, current: Any = None) -> bool:
        """One try to acquire or renew; True when this process holds the Lease after it.
        `current`: the Lease as just read (a listing of all shards' Leases): no second read."""
        sent = self.monotonic()
        lease = current
        if lease is None:
            try:
                lease = self.api.read_namespaced_lease(
                    self.name, self.namespace, _request_timeout=self.timeout
                )
            except kubernetes.client.ApiException as error:
                if error.status != 404:
                    raise
                return self._create(sent)
        self.observed.see(lease)
        spec = lease.spec
        holder = spec.holder_identity or ""
        if holder == self.identity:
            return self._renew(lease, sent)
        if holder and self._renewed is not None:  # someone else wrote it: lost at once
            self.drop()
        if holder and self.observed.holder(self.duration) is not None:
            return False  # seen changing within its duration: its holder lives
        holders = recorded_holders(lease.metadata.annotations)
        spec.holder_identity = self.identity
        spec.acquire_time = spec.renew_time = now = self.clock()
        spec.lease_duration_seconds = int(self.duration)
        spec.lease_transitions = (spec.lease_transitions or 0) + 1
        lease.metadata.annotations = {
            **(lease.metadata.annotations or {}),
            HOLDERS: json.dumps([*holders, self.hostname][-KEEP_HOLDERS:]),
        }
        # resourceVersion makes this a compare-and-swap: of two replicas, one wins; and a
        # holder's renewal that reached the server first makes this one fail.
        self._last = self.api.replace_namespaced_lease(
            self.name, self.namespace, lease, _request_timeout=self.timeout
        )
        self._took(sent, now, holders, previous=holder, transitions=spec.lease_transitions)
        return True

    def renew(self) -> bool:
        """Renew the Lease this process holds (or held until it slipped), in one request: over
        the Lease as this process last wrote it, no read first; after a refusal, read first and
        renewed only if no one else held it since (the same holder, no transition). False: not
        ours, or changed by someone else (409: the next try reads it)."""
        lease, sent = self._last, self.monotonic()
        if self._renewed is None:
            return False
        # A renewal counts from when it was sent, so it may wait for its answer until the runs
        # would be killed anyway: on a slow API server a short timeout only gives up on a
        # renewal that then lands all the same (and makes the next one conflict).
        timeout = max(self.timeout, self.kill_at() - sent)
        try:
            if lease is None:  # refused last time: read it; renewed only if still ours
                lease = self.api.read_namespaced_lease(
                    self.name, self.namespace, _request_timeout=timeout
                )
                self.observed.see(lease)
                spec = lease.spec
                if spec.holder_identity != self.identity or (
                    (spec.lease_transitions or 0) != self.transitions
                ):
                    if spec.holder_identity:  # another holder in between: lost at once
                        self.drop()
                    return False
            return self._renew(lease, sent, timeout)
        except kubernetes.client.ApiException as error:
            if error.status in (404, 409):
                self._last = None
                return False
            raise

    def _renew(self, lease: Any, sent: float, timeout: float | None = None) -> bool:
        lease.spec.renew_time = self.clock()
        self._last = self.api.replace_namespaced_lease(
            self.name, self.namespace, lease, _request_timeout=timeout or self.timeout
        )
        self.observed.see(self._last)
        self._renewed = sent
        return True

    def _create(self, sent: float) -> bool:
        now = self.clock()
        body = kubernetes.client.V1Lease(
            metadata=kubernetes.client.V1ObjectMeta(
                name=self.name,
                namespace=self.namespace,
                annotations={HOLDERS: json.dumps([self.hostname])},
            ),
            spec=kubernetes.client.V1LeaseSpec(
                holder_identity=self.identity,
                acquire_time=now,
                renew_time=now,
                lease_duration_seconds=int(self.duration),
                lease_transitions=0,
            ),
        )
        self._last = self.api.create_namespaced_lease(
            self.namespace, body, _request_timeout=self.timeout
        )
        self._took(sent, now, [], previous="", transitions=0)
        return True

    def _took(
        self, sent: float, now: datetime, holders: list[str], previous: str, transitions: int
    ) -> None:
        self._acquired, self._renewed = now, sent
        self._earlier = frozenset(holders)
        self.transitions = transitions
        log.info(
            "acquired Lease %s/%s as %s (transition %d)%s", self.namespace, self.name,
            self.identity, transitions, f" after {previous}" if previous else "",
        )  # fmt: skip

    def release(self) -> None:
        """Give the Lease up (shutdown, rebalancing), so the next holder need not wait for it
        to expire. Only once no operation of this process is left: the caller makes sure."""
        if self._renewed is None:
            return
        try:
            lease = self.api.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self.timeout
            )
            if lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = ""
                self.api.replace_namespaced_lease(
                    self.name, self.namespace, lease, _request_timeout=self.timeout
                )
                log.info("released Lease %s/%s", self.namespace, self.name)
        except Exception as error:  # it expires by itself
            log.warning("could not release the Lease: %s", _short(error))
        self.drop()

    def drop(self) -> None:
        """Stop counting on the Lease (lost: another holder, or not renewed in time)."""
        self._renewed = self._last = None

    async def run(self) -> None:
        """Acquire and keep renewing until cancelled; tell `on_lost` when it slips away."""
        while True:
            try:
                holding = await asyncio.get_running_loop().run_in_executor(LEASE_THREAD, self.step)
            except Exception as error:  # a conflict or a blip: `held()` runs out on its own
                log.warning("Lease %s/%s: %s", self.namespace, self.name, _short(error))
                holding = self.held()
            if holding:
                self.held_event.set()
            elif self.held_event.is_set():
                self.held_event.clear()
                self._renewed = None
                log.warning("lost Lease %s/%s: stopping every operation", self.namespace, self.name)
                for callback in self.on_lost:
                    callback()
            await asyncio.sleep(self.duration / 3 if holding else self.duration / 6)


def recorded_holders(annotations: dict[str, str] | None) -> list[str]:
    """The hostnames a Lease records as its holders so far, oldest first."""
    try:
        value = json.loads((annotations or {}).get(HOLDERS, "[]"))
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


def hostname_of(identity: str) -> str:
    """The hostname in a holder identity (`<hostname>_<8 hex>`)."""
    return identity.rsplit("_", 1)[0]


def _short(error: Exception) -> str:
    status = getattr(error, "status", None)
    return f"HTTP {status} {getattr(error, 'reason', '')}" if status else str(error)[:200]
