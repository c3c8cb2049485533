"""The engine-call plumbing every reconciler job stands on: one blocking engine call at a
time per pool, a bounded number overall (the engine slots, most urgent first, a share per cloud
account), run in the engine's threads only while this replica serves the pool's shard, each
Pulumi run fenced by the shard's epoch.

Every dependency (the engine, the cluster, events, the clock) comes in from outside so the
logic can be tested without any of them.
"""

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

from spotpool.api.status import Checkpoint
from spotpool.engine.fencing.processes import fenced, kill_runs
from spotpool.engine.tencent.credentials import Credentials
from spotpool_operator.basics.failures import PoolProblem
from spotpool_operator.basics.pools import PoolRef, PoolState
from spotpool_operator.basics.settings import OperatorSettings
from spotpool_operator.cloud.capacity import Capacity
from spotpool_operator.cloud.cost import PriceBook
from spotpool_operator.cloud.fleet import FleetProbe
from spotpool_operator.convergence.engine_types import CloudLookup, EngineFactory, PoolEngine
from spotpool_operator.convergence.slots import EngineSlots, Priority
from spotpool_operator.nodes.keeper import NodeKeeper
from spotpool_operator.nodes.kubejson import NodeApi
from spotpool_operator.replicas.shards import NotServed, ShardLeases
from spotpool_operator.reporting.events import Events, FencedEvents
from spotpool_operator.reporting.kube import Cluster
from spotpool_operator.reporting.metrics import Metrics

T = TypeVar("T")

RUNS = logging.getLogger("spotpool_operator.runs")


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


class EngineCalls:
    def __init__(
        self,
        settings: OperatorSettings,
        cluster: Cluster,
        events: Events,
        metrics: Metrics,
        engine_factory: EngineFactory,
        cloud_lookup: CloudLookup | None = None,
        clock: Callable[[], datetime] = _now,
        probe: FleetProbe | None = None,
        shards: ShardLeases | None = None,
        capacity: Capacity | None = None,
        prices: PriceBook | None = None,
    ) -> None:
        self.settings = settings
        self.capacity = capacity  # stock-aware placement of new slots (None: spec order)
        self.prices = prices  # what each status write says the pool costs (None: no cost)
        self.cluster = cluster
        # Fenced like status: checked right before each post, so the shards set later count.
        self.events = FencedEvents(
            events, lambda uid: self.shards is None or self.shards.serves(uid)
        )
        self.metrics = metrics
        # spec.nodes: the pools' Nodes, through the cluster's own client (a fake one has none)
        core = getattr(cluster, "core", None)
        self.nodes = (
            NodeKeeper(NodeApi(core()), self.events, metrics.registry) if callable(core) else None
        )
        self.engine_factory = engine_factory
        self.cloud_lookup = cloud_lookup
        self.clock = clock
        self.probe = probe
        self.shards = shards  # None: serve every pool (no Leases, run by hand)
        self.pools: dict[str, PoolState] = {}
        # onNotice results answered 'recorded' but not yet written when the pool's shard
        # slipped: given back to the pool's state when this replica serves it again.
        self.unwritten_checkpoints: dict[str, list[Checkpoint]] = {}
        self._slots = EngineSlots(settings.max_concurrent, settings.account_share(1))
        self._executor = ThreadPoolExecutor(
            max_workers=settings.max_concurrent, thread_name_prefix="spotpool-engine"
        )

    def close(self) -> None:
        """Stop: queued calls are dropped, running Pulumi runs killed with their plugins (the
        next holder recovers their locks), rather than left running without an owner."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        kill_runs()

    def _engine(self, ref: PoolRef, credentials: Credentials, region: str) -> PoolEngine:
        logger = ref.logger

        def progress(line: str) -> None:
            # The pinned plugins are found on PATH on purpose: that warning is noise.
            quiet = "from $PATH" in line
            logger.log(logging.DEBUG if quiet else logging.INFO, "%s", line)

        return self.engine_factory(ref.identity, credentials, region, progress)

    async def _engine_call(
        self,
        kind: str,
        call: Callable[..., T],
        *args: Any,
        record: bool = True,
        engine: object | None = None,
    ) -> T:
        """Run one blocking engine call in the engine's threads, at most max_concurrent at once.

        `record`: count it in the operation metrics (not for look-ups that serve one).
        `engine`: the pool's engine when `call` is not one of its bound methods (a closure
        over it): the shard check, the fence and the run log need to know the pool.
        """
        engine = engine if engine is not None else getattr(call, "__self__", None)
        uid: str | None = getattr(getattr(engine, "pool", None), "uid", None)
        namespace = str(getattr(getattr(engine, "pool", None), "namespace", "") or "")
        if self.shards is not None and uid is not None and not self.shards.serves(uid):
            raise _not_served(self.shards, uid)  # another replica's pool now: hands off
        async with self._slot(self._priority(kind, uid), _account(engine), namespace):
            self.metrics.in_flight.inc()
            started = time.monotonic()
            succeeded = False
            try:
                loop = asyncio.get_running_loop()
                value = await loop.run_in_executor(
                    self._executor, partial(self._guarded, uid, engine, call, *args)
                )
                succeeded = True
                return value
            except NotServed:  # the shard went while the call waited for a slot or a thread
                raise _not_served(self.shards, uid) from None
            except asyncio.CancelledError:  # kopf gave up on the handler: so does the engine
                cancel = getattr(getattr(call, "__self__", None), "cancel", None)
                if callable(cancel):
                    cancel()
                raise
            finally:
                self.metrics.in_flight.dec()
                if record:
                    self.metrics.observe_operation(kind, succeeded, time.monotonic() - started)

    @contextlib.asynccontextmanager
    async def _slot(
        self, priority: Priority = Priority.UPDATE, account: str = "", namespace: str = ""
    ) -> AsyncIterator[None]:
        """One of the engine slots (most urgent first, bounded per cloud account, fair across
        namespaces); counted as queued while waiting for it."""
        self.metrics.queued.inc()
        waiting = True
        try:
            async with self._slots.take(priority, account, namespace):
                self.metrics.queued.dec()
                waiting = False
                yield
        finally:
            if waiting:
                self.metrics.queued.dec()

    def _guarded(self, uid: str | None, engine: object, call: Callable[..., T], *args: Any) -> T:
        """In the engine's thread: run only while the pool's shard is served, counted as its
        operation (a shard is given up only when its operations are over), and launch each
        Pulumi CLI only after checking the operation's fence (the shard still held, in the
        same epoch)."""
        if self.shards is None or uid is None:
            return call(*args)
        shards = self.shards
        with shards.operation(uid) as fence, fenced(partial(shards.check, fence)):
            stack = getattr(engine, "name", uid)
            what = getattr(call, "__name__", "call")
            RUNS.debug("%s of %s: shard %d, token %d", what, stack, fence.shard, fence.token)
            RUNS.info("%s of %s begins", what, stack)  # tests check no two replicas overlap
            try:
                return call(*args)
            finally:
                RUNS.info("%s of %s ends", what, stack)

    def _priority(self, kind: str, uid: str | None) -> Priority:
        """Replacing reclaimed instances first, then spec changes, then the periodic refresh,
        then the first up of a new pool."""
        if kind == "refresh":
            return Priority.REFRESH
        pool = self.pools.get(uid) if uid else None
        if kind == "resume" or (pool is not None and (pool.replace_pending or pool.gone_slots)):
            return Priority.REPLACE  # (resume: a cheap read that spares a takeover's up)
        if pool is not None and not pool.converged_once and pool.status.observed_generation is None:
            return Priority.CREATE
        return Priority.UPDATE

    def serving(self, ref: PoolRef) -> bool:
        """This replica serves the pool (holds its shard), or serves every pool."""
        return self.shards is None or self.shards.serves(ref.uid)

    def replicas_changed(self, replicas: int) -> None:
        """`replicas` share the work now: this one takes its share of each account's slots."""
        self._slots.resize(per_account=self.settings.account_share(replicas))


def _not_served(shards: ShardLeases | None, uid: str | None) -> PoolProblem:
    shard = shards.shard(uid) if shards is not None and uid is not None else "?"
    return PoolProblem("NotServed", f"shard {shard} is served by another replica now")


def _account(engine: object) -> str:
    """The cloud account an engine call acts for (a digest of its SecretId, never the id)."""
    credentials = getattr(engine, "credentials", None)
    if isinstance(credentials, Credentials):  # a role's account: its SecretId changes often
        return hashlib.sha256(credentials.bucket_owner().encode()).hexdigest()[:16]
    secret_id = getattr(credentials, "secret_id", None)
    if secret_id is None:
        return ""
    return hashlib.sha256(secret_id.get_secret_value().encode()).hexdigest()[:16]
