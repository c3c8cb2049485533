"""A replica's work on its shards' pools: which operations run (`operation`, each with the
`Fence` checked before every Pulumi CLI launch) and how a shard's work is stopped — at once, no
new operation or launch (`_halt`), its runs killed on a thread of the shard's own until none of
its operations is left (`_drain`). shards.py holds the Leases this answers to."""

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from spotpool_operator.replicas.shard_metrics import ShardMetrics

if TYPE_CHECKING:
    from spotpool_operator.replicas.lease import OperatorLease

log = logging.getLogger("spotpool_operator.shards")
WATCH_EVERY = 0.2  # seconds between two looks for a shard that slipped away


class NotServed(Exception):
    """This replica does not hold the pool's shard (any more)."""


@dataclass(frozen=True)
class Fence:
    """One operation's right to write: the shard, this replica's epoch of it (a loss and a
    re-acquisition end the right) and the Lease's transition count (the fencing token)."""

    shard: int
    epoch: int
    token: int


class ShardWork:
    count: int
    duration: float
    leases: "list[OperatorLease]"
    metrics: ShardMetrics
    on_stop: list[Callable[[int, list[str]], None]]  # (shard, its pools' uids)

    def _init_work(self, shards: int) -> None:
        self._stopped: set[int] = set(range(shards))  # shards whose work is stopped
        self._draining: set[int] = set()  # stopped, with runs being killed (a thread each)
        self._slipped: set[int] = set()  # served, the Lease slipped, the runs kept so far
        self._inflight = [0] * shards
        self._known: dict[str, tuple[int, str]] = {}  # pool uid -> (shard, stack name)
        self._lock = threading.RLock()
        self._lease_locks = [threading.Lock() for _ in range(shards)]  # renew vs release
        self._closing = threading.Event()
        self._epochs = [0] * shards
        self.epoch_began: list[datetime | None] = [None] * shards  # wall clock, per tenure

    @property
    def epochs(self) -> list[int]:
        """How many times this replica took each shard (a tenure each)."""
        return self._epochs

    def shard(self, uid: str) -> int:
        raise NotImplementedError

    def holds(self, shard: int) -> bool:
        """Holding the shard's Lease (renewed recently enough) and its work not stopped."""
        return shard not in self._stopped and self.leases[shard].held()

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
    def operation(self, uid: str) -> Iterator[Fence]:
        """Around one engine call or fast-path launch (in its thread): refused unless the
        shard is served now; counted, so that a shard is given up only when its operations
        are over. Yields the operation's fence, for `check` before each CLI launch and each
        fast-path send."""
        shard = self.shard(uid)
        with self._lock:
            if not self.holds(shard):
                raise NotServed(f"this replica does not hold shard {shard} of the pool")
            self._inflight[shard] += 1
            fence = Fence(shard, self._epochs[shard], self.leases[shard].transitions)
        try:
            yield fence
        finally:
            with self._lock:
                self._inflight[shard] -= 1

    def check(self, fence: Fence) -> None:
        """Right before a Pulumi CLI launch or a write: the operation's shard is held now (not
        slipped), in the same epoch (not lost and re-taken meanwhile) and under the same fencing
        token (no other holder in between)."""
        if (
            not self.holds(fence.shard)
            or self._epochs[fence.shard] != fence.epoch
            or self.leases[fence.shard].transitions != fence.token
        ):
            raise NotServed(
                f"shard {fence.shard} (token {fence.token}) is no longer held by this replica"
            )

    def _halt(self, shard: int, event: str) -> bool:
        """No new operation, no new CLI launch of the shard (quick). False: already stopped."""
        with self._lock:
            if shard in self._stopped:
                return False
            self._stopped.add(shard)
            self._slipped.discard(shard)
        self.metrics.transitions.labels(str(shard), event).inc()
        self.metrics.held.labels(str(shard)).set(0)
        self.metrics.pools.labels(str(shard)).set(0)
        return True

    def _drain_soon(self, shard: int, release: bool) -> None:
        """Kill the shard's runs on a thread of its own, until none of its operations is left;
        then release its Lease if asked."""
        with self._lock:
            if shard in self._draining:
                return
            self._draining.add(shard)
        threading.Thread(
            target=self._drain, args=(shard, release), name=f"shard-{shard}-stop", daemon=True
        ).start()

    def _drain(self, shard: int, release: bool, deadline: float | None = None) -> None:
        try:
            # Released only if its operations ended in time: past the grace (shutdown), a Lease
            # kept is left to expire, even if the operation ends a moment later.
            if self._kill_until_done(shard, deadline) and release:
                with self._lease_locks[shard]:
                    self.leases[shard].release()
        finally:
            with self._lock:
                self._draining.discard(shard)

    def _kill_until_done(self, shard: int, deadline: float | None = None) -> bool:
        """True once none of the shard's operations is left; False when shutdown or the
        deadline came first."""
        uids = self.pools_of(shard)
        warned = time.monotonic()
        while True:
            for callback in self.on_stop:
                try:
                    callback(shard, uids)
                except Exception:
                    log.exception("stopping shard %d", shard)
            if self._closing.is_set():
                return False
            if not self._inflight[shard]:
                return True
            if deadline is not None and time.monotonic() > deadline:
                log.warning("shard %d: %d operation(s) still ending", shard, self._inflight[shard])
                return False
            if time.monotonic() - warned > 10:
                warned = time.monotonic()
                log.warning("shard %d: %d operation(s) still ending: its Lease is kept",
                            shard, self._inflight[shard])  # fmt: skip
            time.sleep(WATCH_EVERY)

    def stop(self, shard: int, event: str) -> bool:
        """Stop the shard's work at once and wait until its operations are over (blocking).
        False: already stopped."""
        if not self._halt(shard, event):
            return False
        self._kill_until_done(shard, deadline=time.monotonic() + self.duration / 3)
        return True

    def _count_pools(self) -> None:
        counts = [0] * self.count
        with self._lock:
            for shard, _ in self._known.values():
                counts[shard] += 1
        for shard, count in enumerate(counts):
            self.metrics.pools.labels(str(shard)).set(count if self.holds(shard) else 0)
