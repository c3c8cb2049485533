"""The replica's shards, held as Kubernetes Leases in the operator's namespace.

Every replica keeps a membership Lease (`<lease>-member-<hostname>`) and, every third of the
Lease duration, lists the namespace's Leases: the live members are the replicas, the shard
Leases say who holds what. `sharding.assign` — the same answer in every replica that sees the
same Leases — says which shards this replica should hold: it acquires those that are free (a
dead replica's, once their Leases expire), renews those it holds, and gives up those now meant
for another replica. The Leases' compare-and-swap makes sure a shard has one holder at a time.
A round's requests go out in parallel, each with a short timeout (lease.py): the renewals of
the shards held, the membership and the listing in one go, so a slow API server costs a round
one request's time, not eighteen.

A replica serves a pool only while it holds the pool's shard (`serves`). The renewals have a
thread of their own (`_renew_loop`), apart from the rounds and the event loop, due every sixth
of the duration and retried at once when one fails, so a busy process still renews half a
duration ahead of a slip. The moment a shard slips (not renewed in time: lease.py says when, on
this replica's monotonic clock) no new operation starts and no Pulumi CLI is launched (`check`,
run before every launch and every write with the operation's `Fence`); a renewal that comes
late, with no other holder in between, takes the shard back with its runs under way (their
writes were never at risk: no one else could hold it). At the Lease's `kill_at`, a sixth of the
duration before anyone else may take the shard over, the running runs of its stacks are killed
with their plugins (`on_stop`) by a thread of the shard's own — a watcher thread notices within
a fifth of a second. A shard given up to
rebalance is stopped the same way and released only once none of its operations is left;
until then its Lease is renewed. Each shard Lease records its holders' hostnames, so the next
holder breaks exactly the locks those runs left (engine/fencing/ownership.py, through `view`); and
`install_hosts` reads every Lease of the install, so a lock of a host that held another of them
(the single Lease before shards, a shard under another count) and holds none now is broken too.
"""

import asyncio
import concurrent.futures
import contextlib
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

import kubernetes
from prometheus_client import CollectorRegistry

from spotpool.engine.fencing.ownership import InstallHosts
from spotpool_operator.replicas.lease import (
    Observed,
    OperatorLease,
    hostname_of,
    lease_clock,
    recorded_holders,
    request_timeout,
    wall_clock,
)
from spotpool_operator.replicas.shard_metrics import ShardMetrics
from spotpool_operator.replicas.shard_work import WATCH_EVERY, Fence, NotServed, ShardWork
from spotpool_operator.replicas.sharding import (
    MEMBER_INFIX,
    assign,
    member_lease_name,
    of_install,
    shard_lease_name,
    shard_of,
)

__all__ = ["Fence", "NotServed", "ShardLeases", "ShardMetrics", "ShardView"]
log = logging.getLogger("spotpool_operator.shards")
SHARDS_ANNOTATION = "spotpool.devops.jokerbai.com/shards"  # on member Leases: the shard count
FORGET_MEMBERS_AFTER = 10  # Lease durations after which a dead member's Lease is deleted


class _QuietLeaseRequests(logging.Filter):
    """Every replica renews its Leases every few seconds: their HTTP debug lines would drown
    everything else at -v."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "coordination.k8s.io" not in str(record.args)


logging.getLogger("urllib3.connectionpool").addFilter(_QuietLeaseRequests())


class ShardView:
    """One shard's Lease seen as the engine's LeaseView (engine/fencing/ownership.py)."""

    def __init__(self, owner: "ShardLeases", shard: int) -> None:
        self.owner, self.shard = owner, shard

    def held(self) -> bool:
        return self.owner.holds(self.shard)

    def acquired_at(self) -> datetime:
        """When this replica's present tenure of the shard began: a shard lost and re-taken
        while its Lease still named this replica (a renewal that came late) is a new tenure,
        and every run of the earlier one was drained before it began."""
        acquired = self.owner.leases[self.shard].acquired_at()
        began = self.owner.epoch_began[self.shard]
        return max(acquired, began) if began is not None else acquired

    def earlier_holders(self) -> frozenset[str]:
        """The Lease's recorded holders before this replica, and this replica itself once it
        re-took the shard: its runs of an earlier tenure were killed and drained first."""
        earlier = self.owner.leases[self.shard].earlier_holders()
        if self.owner.epochs[self.shard] > 1:
            earlier |= {self.owner.hostname}
        return earlier

    def install_hosts(self) -> InstallHosts:
        try:
            return self.owner.install_hosts()
        except Exception as error:  # nothing proven: the lock is kept, the pool retries
            log.warning("could not list the Leases: %s", _short(error))
            return InstallHosts(frozenset(), frozenset())


class ShardLeases(ShardWork):
    def __init__(
        self,
        api: Any,
        namespace: str,
        base: str,
        shards: int,
        duration: float = 30.0,
        hostname: str | None = None,
        clock: Callable[[], datetime] = wall_clock,
        registry: CollectorRegistry | None = None,
        monotonic: Callable[[], float] = lease_clock,
    ) -> None:
        self.api = api  # a kubernetes.client.CoordinationV1Api
        self.namespace, self.base, self.count = namespace, base, shards
        self.duration = duration
        self.timeout = request_timeout(duration)
        self.hostname = hostname or socket.gethostname()
        self.identity = f"{self.hostname}_{uuid.uuid4().hex[:8]}"
        self.clock, self.monotonic = clock, monotonic

        def lease(name: str) -> OperatorLease:
            made = OperatorLease(api, namespace, name, duration, self.hostname, clock, monotonic)
            made.identity = self.identity  # one identity for every Lease of this replica
            return made

        self.member = lease(member_lease_name(base, self.hostname))
        self.leases = [lease(shard_lease_name(base, shards, s)) for s in range(shards)]
        self.replicas = 1
        self.holders: dict[int, str | None] = {}  # as the last listing showed them
        self.on_stop: list[Callable[[int, list[str]], None]] = []  # (shard, its pools' uids)
        self.on_replicas: list[Callable[[int], None]] = []
        self.metrics = ShardMetrics(registry or CollectorRegistry(), shards)
        self._init_work(shards)
        self._observed: dict[str, Observed] = {}  # other Leases (members) as last seen
        self._requests = concurrent.futures.ThreadPoolExecutor(
            max_workers=min(8, shards + 2), thread_name_prefix="lease"
        )
        # The renewal thread's requests: never queued behind a round's listing or acquisitions.
        self._renewers = concurrent.futures.ThreadPoolExecutor(
            max_workers=min(8, shards), thread_name_prefix="lease-renew"
        )
        self._wakers = [asyncio.Event() for _ in range(shards)]
        self._loop: asyncio.AbstractEventLoop | None = None
        self.first_step = threading.Event()

    # --- what the reconciler asks ----------------------------------------------------------

    def shard(self, uid: str) -> int:
        return shard_of(uid, self.count)

    def serves(self, uid: str) -> bool:
        return self.holds(self.shard(uid))

    def view(self, uid: str) -> ShardView:
        return ShardView(self, self.shard(uid))

    def epoch(self, uid: str) -> int:
        """How many times this replica acquired the pool's shard: a new epoch means a takeover
        (whatever it knew of the pool before was dropped)."""
        return self._epochs[self.shard(uid)]

    def writer(self, uid: str) -> dict[str, Any]:
        """Who writes the pool's status from this replica: its shard Lease, that Lease's uid and
        fencing token (leaseTransitions when this replica took it), this replica's identity."""
        lease = self.leases[self.shard(uid)]
        return {
            "lease": lease.name,
            "leaseUid": lease.uid,
            "token": lease.transitions,
            "holder": self.identity,
        }

    def served_event(self, uid: str) -> asyncio.Event:
        """Set when this replica next acquires the pool's shard."""
        return self._wakers[self.shard(uid)]

    def install_hosts(self) -> InstallHosts:
        """Who held and who holds any Lease of this install (the single Lease of before shards,
        every shard Lease whatever the shard count, the membership Leases), read now; each
        Lease's holder counts while it lasts by lease.py's rule (this replica's monotonic clock
        since it saw the Lease change)."""
        listed = self.api.list_namespaced_lease(self.namespace, _request_timeout=self.timeout)
        ours = {lease.name: lease.observed for lease in [self.member, *self.leases]}
        earlier: set[str] = set()
        current = {self.hostname}
        for item in listed.items:
            name = item.metadata.name
            if not of_install(self.base, name):
                continue
            seen = ours.get(name) or self._observed.setdefault(name, Observed(self.monotonic))
            seen.see(item)
            earlier.update(recorded_holders(item.metadata.annotations))
            if holder := seen.holder(self.duration):
                current.add(hostname_of(holder))
        return InstallHosts(frozenset(earlier), frozenset(current))

    # --- holding the Leases ------------------------------------------------------------------

    def step(self, renew: bool = True) -> None:
        """One round (blocking; in the rounds' thread): renew the membership, and the shards
        held unless the renewal thread does (`renew` False), and list the Leases, all at once;
        then acquire or give up shards as the assignment says. Stopping a shard's work is
        handed to a thread of its own."""
        submit = self._requests.submit
        member = submit(self._renew_member)
        listed = submit(
            self.api.list_namespaced_lease, self.namespace, _request_timeout=self.timeout
        )
        if renew:
            self.renew_due(self._requests, every=True)
        with contextlib.suppress(Exception):
            member.result()
        listing = {item.metadata.name: item for item in listed.result().items}
        self._plan(listing, renewed={s for s, lease in enumerate(self.leases) if lease.held()})
        self._note_acquired()
        self.first_step.set()

    def renew_due(self, pool: concurrent.futures.ThreadPoolExecutor, every: bool = False) -> None:
        """Renew at once (in `pool`'s threads) the shards' Leases that are this replica's (held,
        or slipped and not past their `kill_at`) and due for a renewal (`every`: all of them)."""
        renewals = {
            shard: pool.submit(self._locked, shard, lease.renew)
            for shard, lease in enumerate(self.leases)
            if (lease.ours() if every else lease.renewal_due())
        }
        for shard, renewal in renewals.items():
            with contextlib.suppress(Exception):  # a slow or failed renewal: tried again
                if not renewal.result():
                    log.info("shard %d: renewal refused, reading its Lease again", shard)

    def _renew_loop(self, done: threading.Event) -> None:
        """The renewals' own thread: every thirtieth of the duration, renew what is due (a
        failed renewal is due again at once)."""
        tick = max(0.05, self.duration / 30)
        while not done.wait(tick):
            try:
                self.renew_due(self._renewers)
            except Exception:  # keep renewing whatever one round of them met
                log.exception("renewing the shard Leases")

    def _plan(self, listing: dict[str, Any], renewed: set[int]) -> None:
        members = {self.identity}
        ours = {lease.name for lease in [self.member, *self.leases]}
        for name, item in listing.items():  # every other Lease of the install, timed from now
            if of_install(self.base, name) and name not in ours:  # (install_hosts)
                self._observed.setdefault(name, Observed(self.monotonic)).see(item)
        for name, item in listing.items():
            if not name.startswith(self.base + MEMBER_INFIX) or name == self.member.name:
                continue
            seen = self._observed.setdefault(name, Observed(self.monotonic))
            seen.see(item)
            if holder := seen.holder(self.duration):
                members.add(holder)
            else:
                self._forget_member(name, seen)
        for lease in self.leases:
            if lease.name in listing:
                lease.observed.see(listing[lease.name])
        self.holders = {
            s: lease.observed.holder(self.duration) if lease.name in listing else None
            for s, lease in enumerate(self.leases)
        }
        plan = assign(self.count, self.holders, members)
        legacy = listing.get(self.base) if self.count > 1 else None
        if legacy is not None:
            seen = self._observed.setdefault(self.base, Observed(self.monotonic))
            seen.see(legacy)
            if seen.holder(self.duration):
                # A replica from before shards holds the single Lease (a rollout from that
                # version): it writes every stack until it lets go, so this one holds nothing.
                log.warning("Lease %s is held (an unsharded replica): waiting", self.base)
                plan = {}
        if len(members) != self.replicas:
            log.info("%d replica(s) now share %d shard(s)", len(members), self.count)
            self.replicas = len(members)
            self.call_soon(partial(self._replicas_changed, len(members)))
        self.metrics.replicas.set(len(members))
        tries = {}
        for shard, lease in enumerate(self.leases):
            holder = self.holders[shard]
            if holder not in (None, self.identity):  # another replica's: never ours to serve
                lease.drop()
                if self._halt(shard, "lost"):
                    log.warning("shard %d is held by %s: stopping its work", shard, holder)
                    self._drain_soon(shard, release=False)
            elif plan.get(shard) == self.identity and shard not in self._draining:
                if shard not in renewed:
                    tries[shard] = self._requests.submit(
                        self._locked, shard, partial(lease.step, listing.get(lease.name))
                    )
            elif holder == self.identity or shard not in self._stopped:
                self._give_up(shard)
        for shard, attempt in tries.items():
            try:
                attempt.result()
            except kubernetes.client.ApiException as error:
                if error.status not in (409, 404):  # lost a race: the next round sees
                    log.warning("shard %d: %s", shard, _short(error))
            except Exception as error:
                log.warning("shard %d: %s", shard, _short(error))

    def _locked(self, shard: int, call: Callable[[], bool]) -> bool:
        with self._lease_locks[shard]:
            return call()

    def _renew_member(self) -> None:
        """Keep the membership Lease; it also says how many shards this replica uses (for
        `spotpool shards`)."""
        if not self.member.renew():  # one request while held; else read and take it
            self.member.step()
        if getattr(self, "_annotated", False) or self.member._last is None:
            return
        lease = self.member._last
        annotations = lease.metadata.annotations or {}
        annotations[SHARDS_ANNOTATION] = str(self.count)
        lease.metadata.annotations = annotations
        self.member._renew(lease, self.monotonic())
        self._annotated = True

    def _forget_member(self, name: str, seen: Observed) -> None:
        """A member not seen to change for many durations is gone: delete its Lease."""
        if seen.record and self.monotonic() > seen.at + FORGET_MEMBERS_AFTER * self.duration:
            with contextlib.suppress(Exception):
                self.api.delete_namespaced_lease(
                    name, self.namespace, _request_timeout=self.timeout
                )

    def _note_acquired(self) -> None:
        for shard, lease in enumerate(self.leases):
            if shard in self._stopped and shard not in self._draining and lease.held():
                with self._lock:
                    self._epochs[shard] += 1
                    self.epoch_began[shard] = self.clock()
                    self._stopped.discard(shard)
                log.info("serving shard %d (Lease %s, token %d)", shard, lease.name,
                         lease.transitions)  # fmt: skip
                self.metrics.transitions.labels(str(shard), "acquired").inc()
                self.metrics.held.labels(str(shard)).set(1)
                self.call_soon(partial(self._wake, shard))

    def _give_up(self, shard: int) -> None:
        """Another replica's turn (rebalancing): stop the shard's work; release the Lease once
        its operations are over (renewed until then)."""
        if self._halt(shard, "released"):
            log.info("giving shard %d up to rebalance (%d replicas)", shard, self.replicas)
        if shard not in self._draining:
            self._drain_soon(shard, release=True)

    def release_all(self, grace: float = 10.0) -> None:
        """At shutdown, within `grace` seconds: stop every shard's work at once, give back the
        Leases of the shards whose operations are over (the rest expire), leave the
        membership."""
        deadline = time.monotonic() + grace
        for shard in range(self.count):
            self._halt(shard, "released")
        drains = [
            self._requests.submit(self._drain, shard, True, deadline)
            for shard in range(self.count)
            if self.leases[shard]._renewed is not None and shard not in self._draining
        ]
        concurrent.futures.wait(drains, timeout=max(0.0, deadline - time.monotonic()))
        self._closing.set()
        with contextlib.suppress(Exception):
            self.api.delete_namespaced_lease(
                self.member.name, self.namespace, _request_timeout=self.timeout
            )
        self._requests.shutdown(wait=False, cancel_futures=True)
        self._renewers.shutdown(wait=False, cancel_futures=True)

    # --- the loops ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Keep the shards until cancelled: a round every third of the duration, a renewal
        thread, and a watcher thread that stops a shard's launches the moment its Lease slips
        and kills its runs at the Lease's `kill_at` unless a renewal took it back."""
        self._loop = loop = asyncio.get_running_loop()
        watching = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(watching,), name="shard-watch",
                                   daemon=True)  # fmt: skip
        watcher.start()
        renewer = threading.Thread(target=self._renew_loop, args=(watching,), name="lease-renew",
                                   daemon=True)  # fmt: skip
        renewer.start()
        renewals = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="shard-rounds")
        try:
            while True:
                started = time.monotonic()
                try:
                    await loop.run_in_executor(renewals, partial(self.step, renew=False))
                except Exception as error:  # a conflict or a blip: `held()` runs out on its own
                    log.warning("shard Leases: %s", _short(error))
                # A round every third of the duration, however long the renewals took.
                await asyncio.sleep(max(0.0, self.duration / 3 - (time.monotonic() - started)))
        finally:
            watching.set()
            renewals.shutdown(wait=False)

    def _watch(self, done: threading.Event) -> None:
        """Every fifth of a second, `watch_once`; the pools counted every half second."""
        counted = 0.0
        while not done.wait(WATCH_EVERY):
            self.watch_once()
            if time.monotonic() - counted > 0.5:
                counted = time.monotonic()
                self._count_pools()

    def watch_once(self) -> None:
        """A served shard whose Lease slipped launches nothing more (its fence refuses: not
        held); one past its `kill_at` is stopped, its runs killed on a thread of its own (every
        such shard at once); one renewed in time again goes on with its runs."""
        for shard, lease in enumerate(self.leases):
            if shard in self._stopped:
                continue
            if lease.held():
                if shard in self._slipped:
                    self._slipped.discard(shard)
                    log.warning("shard %d: Lease %s renewed late, no other holder in between: "
                                "its runs go on", shard, lease.name)  # fmt: skip
                    self.metrics.transitions.labels(str(shard), "kept").inc()
                continue
            if not lease.ours():
                if self._halt(shard, "lost"):
                    log.warning("lost shard %d (Lease %s): stopping its work", shard, lease.name)
                    self._drain_soon(shard, release=False)
            elif shard not in self._slipped:
                self._slipped.add(shard)
                log.warning("shard %d: Lease %s slipped (renewal late): no new launch; its "
                            "runs are killed in %.1f s unless it is renewed", shard, lease.name,
                            lease.kill_at() - lease.monotonic())  # fmt: skip
                self.metrics.transitions.labels(str(shard), "slipped").inc()

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


def _short(error: BaseException) -> str:
    status = getattr(error, "status", None)
    return f"HTTP {status} {getattr(error, 'reason', '')}" if status else str(error)[:200]
