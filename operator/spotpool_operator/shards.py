"""The replica's shards, held as Kubernetes Leases in the operator's namespace.

Every replica keeps a membership Lease (`<lease>-member-<hostname>`) and, every third of the
Lease duration, lists the namespace's Leases: the live members are the replicas, the shard
Leases say who holds what. `sharding.assign` — the same answer in every replica that sees the
same Leases — says which shards this replica should hold: it acquires those that are free (a
dead replica's, once their Leases expire), renews those it holds, and gives up those now meant
for another replica. The Leases' compare-and-swap makes sure a shard has one holder at a time.

A replica serves a pool only while it holds the pool's shard (`serves`). The moment a shard
slips away (not renewed in time) or is given up, its work stops: no new operation starts, the
running Pulumi runs of its stacks are killed with their plugins (`on_stop`), and a shard given
up is released only once none of its operations is left. Each shard Lease records its
holders' hostnames, so the next holder breaks exactly the locks those runs left
(engine/ownership.py, through `view`).
"""

import asyncio
import contextlib
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import kubernetes
from prometheus_client import CollectorRegistry, Counter, Gauge

from spotpool_operator.lease import LEASE_THREAD, OperatorLease
from spotpool_operator.sharding import (
    MEMBER_INFIX,
    assign,
    member_lease_name,
    shard_lease_name,
    shard_of,
)

log = logging.getLogger("spotpool_operator.shards")
SHARDS_ANNOTATION = "spotpool.devops.jokerbai.com/shards"  # on member Leases: the shard count
FORGET_MEMBERS_AFTER = 10  # Lease durations after which a dead member's Lease is deleted


class NotServed(Exception):
    """This replica does not hold the pool's shard (any more)."""


def _now() -> datetime:
    return datetime.now(UTC)


class _QuietLeaseRequests(logging.Filter):
    """Every replica renews its Leases every few seconds: their HTTP debug lines would drown
    everything else at -v."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "coordination.k8s.io" not in str(record.args)


logging.getLogger("urllib3.connectionpool").addFilter(_QuietLeaseRequests())


def live_holder(lease: Any, now: datetime, default_duration: float) -> str | None:
    """The Lease's holder while its Lease lasts, else None."""
    spec = lease.spec
    holder = spec.holder_identity or ""
    renewed = spec.renew_time or spec.acquire_time
    if not holder or renewed is None:
        return None
    duration = spec.lease_duration_seconds or default_duration
    return str(holder) if now <= renewed + timedelta(seconds=duration) else None


class ShardMetrics:
    def __init__(self, registry: CollectorRegistry, shards: int) -> None:
        self.shards = Gauge("spotpool_shards", "Shards the pools hash onto.", registry=registry)
        self.shards.set(shards)
        self.replicas = Gauge(
            "spotpool_shard_replicas",
            "Live replicas this replica counts (membership Leases).",
            registry=registry,
        )
        self.held = Gauge(
            "spotpool_shard_held",
            "1 while this replica holds the shard's Lease.",
            ["shard"],
            registry=registry,
        )
        self.pools = Gauge(
            "spotpool_shard_pools",
            "Pools of the shard this replica serves (0 while it does not hold the shard).",
            ["shard"],
            registry=registry,
        )
        self.transitions = Counter(
            "spotpool_shard_transitions",
            "Shards acquired, released (rebalancing, shutdown) and lost (not renewed in time).",
            ["shard", "event"],
            registry=registry,
        )
        for shard in range(shards):
            self.held.labels(str(shard)).set(0)
            self.pools.labels(str(shard)).set(0)


class ShardView:
    """One shard's Lease seen as the engine's LeaseView (engine/ownership.py)."""

    def __init__(self, owner: "ShardLeases", shard: int) -> None:
        self.owner, self.shard = owner, shard

    def held(self) -> bool:
        return self.owner.holds(self.shard)

    def acquired_at(self) -> datetime:
        return self.owner.leases[self.shard].acquired_at()

    def earlier_holders(self) -> frozenset[str]:
        return self.owner.leases[self.shard].earlier_holders()


class ShardLeases:
    def __init__(
        self,
        api: Any,
        namespace: str,
        base: str,
        shards: int,
        duration: float = 30.0,
        hostname: str | None = None,
        clock: Callable[[], datetime] = _now,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.api = api  # a kubernetes.client.CoordinationV1Api
        self.namespace, self.base, self.count = namespace, base, shards
        self.duration = duration
        self.hostname = hostname or socket.gethostname()
        self.identity = f"{self.hostname}_{uuid.uuid4().hex[:8]}"
        self.clock = clock

        def lease(name: str) -> OperatorLease:
            made = OperatorLease(api, namespace, name, duration, self.hostname, clock)
            made.identity = self.identity  # one identity for every Lease of this replica
            return made

        self.member = lease(member_lease_name(base, self.hostname))
        self.leases = [lease(shard_lease_name(base, shards, s)) for s in range(shards)]
        self.replicas = 1
        self.holders: dict[int, str | None] = {}  # as the last listing showed them
        self.on_stop: list[Callable[[int, list[str]], None]] = []  # (shard, its pools' uids)
        self.on_replicas: list[Callable[[int], None]] = []
        self.metrics = ShardMetrics(registry or CollectorRegistry(), shards)
        self._stopped: set[int] = set(range(shards))  # shards whose work is stopped
        self._inflight = [0] * shards
        self._known: dict[str, tuple[int, str]] = {}  # pool uid -> (shard, stack name)
        self._lock = threading.RLock()
        self._wakers = [asyncio.Event() for _ in range(shards)]
        self._epochs = [0] * shards
        self._loop: asyncio.AbstractEventLoop | None = None
        self.first_step = threading.Event()

    # --- what the reconciler asks ----------------------------------------------------------

    def shard(self, uid: str) -> int:
        return shard_of(uid, self.count)

    def holds(self, shard: int) -> bool:
        """Holding the shard's Lease (renewed recently enough) and its work not stopped."""
        return shard not in self._stopped and self.leases[shard].held()

    def serves(self, uid: str) -> bool:
        return self.holds(self.shard(uid))

    def view(self, uid: str) -> ShardView:
        return ShardView(self, self.shard(uid))

    def epoch(self, uid: str) -> int:
        """How many times this replica acquired the pool's shard: a new epoch means a takeover
        (whatever it knew of the pool before was dropped)."""
        return self._epochs[self.shard(uid)]

    def served_event(self, uid: str) -> asyncio.Event:
        """Set when this replica next acquires the pool's shard."""
        return self._wakers[self.shard(uid)]

    def know(self, uid: str, stack: str) -> None:
        """A pool exists (whoever serves it): counted per shard, its runs killed on a stop."""
        with self._lock:
            self._known[uid] = (self.shard(uid), stack)

    def forget(self, uid: str) -> None:
        with self._lock:
            self._known.pop(uid, None)

    def pools_of(self, shard: int) -> list[str]:
        with self._lock:
            return [uid for uid, (s, _) in self._known.items() if s == shard]

    def stack_of(self, uid: str) -> str | None:
        known = self._known.get(uid)
        return known[1] if known else None

    @contextlib.contextmanager
    def operation(self, uid: str) -> Iterator[None]:
        """Around one engine call (in its thread): refused unless the shard is served now;
        counted, so that a shard is given up only when its operations are over."""
        shard = self.shard(uid)
        with self._lock:
            if not self.holds(shard):
                raise NotServed(f"this replica does not hold shard {shard} of the pool")
            self._inflight[shard] += 1
        try:
            yield
        finally:
            with self._lock:
                self._inflight[shard] -= 1

    # --- holding the Leases ------------------------------------------------------------------

    def step(self) -> None:
        """One round (blocking; run in a thread): renew membership, list the Leases, acquire,
        renew or give up shards as the assignment says."""
        self.member.step()
        self._annotate_member()
        now = self.clock()
        listing = {
            item.metadata.name: item
            for item in self.api.list_namespaced_lease(self.namespace, _request_timeout=10).items
        }
        members = {self.identity}
        for name, item in listing.items():
            if not name.startswith(self.base + MEMBER_INFIX):
                continue
            holder = live_holder(item, now, self.duration)
            if holder:
                members.add(holder)
            elif name != self.member.name:
                self._forget_member(item, now)
        self.holders = {
            s: live_holder(listing[lease.name], now, self.duration)
            if lease.name in listing
            else None
            for s, lease in enumerate(self.leases)
        }
        plan = assign(self.count, self.holders, members)
        legacy = listing.get(self.base) if self.count > 1 else None
        if legacy is not None and live_holder(legacy, now, self.duration):
            # A replica from before shards holds the single Lease (a rollout from that
            # version): it writes every stack until it lets go, so this one holds nothing.
            log.warning("Lease %s is held (an unsharded replica): waiting", self.base)
            plan = {}
        if len(members) != self.replicas:
            log.info("%d replica(s) now share %d shard(s)", len(members), self.count)
            self.replicas = len(members)
            self.call_soon(partial(self._replicas_changed, len(members)))
        self.metrics.replicas.set(len(members))
        for shard, lease in enumerate(self.leases):
            holder = self.holders[shard]
            if holder not in (None, self.identity):  # another replica's: never ours to serve
                if self.stop(shard, "lost"):
                    log.warning("shard %d is held by %s: stopped its work", shard, holder)
            elif plan.get(shard) == self.identity:
                try:
                    lease.step(listing.get(lease.name))
                except kubernetes.client.ApiException as error:
                    if error.status not in (409, 404):  # lost a race: the next round sees
                        raise
            elif holder == self.identity or shard not in self._stopped:
                self._give_up(shard, lease)
        self._note_acquired()
        self.first_step.set()

    def _annotate_member(self) -> None:
        """The member Lease says how many shards this replica uses (for `spotpool shards`)."""
        if getattr(self, "_annotated", False):
            return
        with contextlib.suppress(Exception):
            lease = self.api.read_namespaced_lease(
                self.member.name, self.namespace, _request_timeout=10
            )
            if lease.spec.holder_identity == self.identity:
                annotations = lease.metadata.annotations or {}
                annotations[SHARDS_ANNOTATION] = str(self.count)
                lease.metadata.annotations = annotations
                self.api.replace_namespaced_lease(
                    self.member.name, self.namespace, lease, _request_timeout=10
                )
                self._annotated = True

    def _forget_member(self, item: Any, now: datetime) -> None:
        renewed = item.spec.renew_time or item.spec.acquire_time or item.metadata.creation_timestamp
        if renewed and now > renewed + timedelta(seconds=FORGET_MEMBERS_AFTER * self.duration):
            with contextlib.suppress(Exception):
                self.api.delete_namespaced_lease(
                    item.metadata.name, self.namespace, _request_timeout=10
                )

    def _note_acquired(self) -> None:
        for shard, lease in enumerate(self.leases):
            if shard in self._stopped and lease.held():
                with self._lock:
                    self._epochs[shard] += 1
                    self._stopped.discard(shard)
                log.info("serving shard %d (Lease %s)", shard, lease.name)
                self.metrics.transitions.labels(str(shard), "acquired").inc()
                self.metrics.held.labels(str(shard)).set(1)
                self.call_soon(partial(self._wake, shard))

    def _give_up(self, shard: int, lease: OperatorLease) -> None:
        """Another replica's turn (rebalancing): stop the shard's work, then release it."""
        if self.stop(shard, "released"):
            log.info("gave shard %d up to rebalance (%d replicas)", shard, self.replicas)
        lease.release()

    def stop(self, shard: int, event: str) -> bool:
        """Stop the shard's work at once (blocking): no new operation, its runs killed, and
        wait (a third of the Lease at most) until its operations are over. False: already."""
        with self._lock:
            if shard in self._stopped:
                return False
            self._stopped.add(shard)
        self.metrics.transitions.labels(str(shard), event).inc()
        self.metrics.held.labels(str(shard)).set(0)
        self.metrics.pools.labels(str(shard)).set(0)
        uids = self.pools_of(shard)
        deadline = time.monotonic() + self.duration / 3
        while True:
            for callback in self.on_stop:
                try:
                    callback(shard, uids)
                except Exception:
                    log.exception("stopping shard %d", shard)
            if not self._inflight[shard] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if self._inflight[shard]:
            log.warning("shard %d: %d operation(s) still ending", shard, self._inflight[shard])
        return True

    def release_all(self) -> None:
        """At shutdown: stop every shard's work, give the Leases back, leave the membership."""
        for shard, lease in enumerate(self.leases):
            self.stop(shard, "released")
            lease.release()
        with contextlib.suppress(Exception):
            self.api.delete_namespaced_lease(self.member.name, self.namespace, _request_timeout=5)

    # --- the loops ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Keep the shards until cancelled: a round every third of the duration, and a look
        every half second for a shard whose Lease slipped away (renewals failing)."""
        self._loop = loop = asyncio.get_running_loop()
        watch = asyncio.create_task(self._watch(), name="shard-watch")
        try:
            while True:
                started = time.monotonic()
                try:
                    await loop.run_in_executor(LEASE_THREAD, self.step)  # own thread
                except Exception as error:  # a conflict or a blip: `held()` runs out on its own
                    log.warning("shard Leases: %s", _short(error))
                # A round every third of the duration, however long the renewals took.
                await asyncio.sleep(max(0.0, self.duration / 3 - (time.monotonic() - started)))
        finally:
            watch.cancel()

    async def _watch(self) -> None:
        while True:
            for shard, lease in enumerate(self.leases):
                if shard not in self._stopped and not lease.held():
                    log.warning("lost shard %d (Lease %s): stopping its work", shard, lease.name)
                    await asyncio.to_thread(self.stop, shard, "lost")
            self._count_pools()
            await asyncio.sleep(0.5)

    def _count_pools(self) -> None:
        counts = [0] * self.count
        with self._lock:
            for shard, _ in self._known.values():
                counts[shard] += 1
        for shard, count in enumerate(counts):
            self.metrics.pools.labels(str(shard)).set(count if self.holds(shard) else 0)

    def _replicas_changed(self, count: int) -> None:
        for callback in self.on_replicas:
            callback(count)

    def _wake(self, shard: int) -> None:
        """Wake the pools waiting for this shard (each waits on the Event it was handed)."""
        old, self._wakers[shard] = self._wakers[shard], asyncio.Event()
        old.set()

    def call_soon(self, callback: Callable[[], Any]) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(callback)


def _short(error: Exception) -> str:
    status = getattr(error, "status", None)
    return f"HTTP {status} {getattr(error, 'reason', '')}" if status else str(error)[:200]
