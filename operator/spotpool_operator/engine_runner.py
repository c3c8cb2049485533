"""The shared machinery of the reconciler: what it holds per pool, and the engine runner —
one blocking engine call at a time per pool, a bounded number overall, the status written
around every operation, Events for what a person should know.

The kopf handlers (handlers.py) only translate; every decision is made in the reconciler's
modules (converge, reclaims, deletion), and every dependency (the engine, the cluster, events,
the clock) comes in from outside so the logic can be tested without any of them.
"""

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol, TypeVar

from pydantic import SecretStr, ValidationError

from spotpool.api.placement import NoCapacity
from spotpool.api.spec import ChargeType, SpotpoolSpec, parse_duration
from spotpool.api.stackconfig import PoolIdentity, StackConfig
from spotpool.api.status import SpotpoolStatus
from spotpool.engine.credentials import Credentials
from spotpool.engine.processes import fenced, kill_runs
from spotpool.engine.results import OperationResult
from spotpool_operator import status as render
from spotpool_operator.capacity import Capacity, Replan, live_slots
from spotpool_operator.credentials import INLINE_WARNING, login_password, resolve
from spotpool_operator.events import Events
from spotpool_operator.failures import PoolProblem, classify
from spotpool_operator.fast_path import launch_ahead
from spotpool_operator.fleet import FleetProbe
from spotpool_operator.kube import Cluster
from spotpool_operator.metrics import Metrics
from spotpool_operator.pools import PoolRef, PoolState
from spotpool_operator.settings import OperatorSettings
from spotpool_operator.shards import NotServed, ShardLeases
from spotpool_operator.slots import EngineSlots, Priority

T = TypeVar("T")


class PoolEngine(Protocol):
    """The part of `spotpool.engine.stack.PoolStack` the operator uses."""

    def up(
        self,
        config: StackConfig,
        login_password: str | None = None,
        refresh: bool = False,
        replan: Replan | None = None,
    ) -> OperationResult: ...

    def refresh(self) -> OperationResult: ...

    def replace_slots(
        self,
        config: StackConfig,
        slots: list[int],
        login_password: str | None = None,
        replan: Replan | None = None,
    ) -> OperationResult: ...

    def start_surge(
        self, config: StackConfig, slots: list[int], login_password: str | None = None
    ) -> OperationResult: ...

    def retire_surges(
        self, config: StackConfig, slots: list[int], login_password: str | None = None
    ) -> OperationResult: ...

    def destroy(self, remove_stack: bool = True) -> OperationResult: ...

    def forget(self) -> None: ...

    def state_instance_ids(self) -> dict[int, str]: ...

    def held_instance_ids(self) -> dict[str, str]: ...

    def applied_config(self) -> StackConfig | None: ...


EngineFactory = Callable[[PoolIdentity, Credentials, str, Callable[[str], None]], PoolEngine]
# Ids of the pool's live instances, straight from the cloud API (one cheap call, no Pulumi).
CloudLookup = Callable[[PoolIdentity, Credentials, str], set[str]]
NO_CREDENTIALS = Credentials(secret_id=SecretStr(""), secret_key=SecretStr(""))


RUNS = logging.getLogger("spotpool_operator.runs")


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


class PoolWork:
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
    ) -> None:
        self.settings = settings
        self.capacity = capacity  # stock-aware placement of new slots (None: spec order)
        self.cluster = cluster
        self.events = events
        self.metrics = metrics
        self.engine_factory = engine_factory
        self.cloud_lookup = cloud_lookup
        self.clock = clock
        self.probe = probe
        self.shards = shards  # None: serve every pool (no Leases, run by hand)
        self.pools: dict[str, PoolState] = {}
        self._slots = EngineSlots(settings.max_concurrent, settings.account_share(1))
        self._executor = ThreadPoolExecutor(
            max_workers=settings.max_concurrent, thread_name_prefix="spotpool-engine"
        )

    def close(self) -> None:
        """Stop: queued calls are dropped, running Pulumi runs killed with their plugins (the
        next holder recovers their locks), rather than left running without an owner."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        kill_runs()

    # --- bookkeeping ----------------------------------------------------------------------

    def pool(self, ref: PoolRef) -> PoolState:
        state = self.pools.get(ref.uid)
        if state is None:
            state = PoolState(status=render.parse(ref.status))
            self.pools[ref.uid] = state
        return state

    def forget(self, ref: PoolRef) -> None:
        self.pools.pop(ref.uid, None)
        if self.probe is not None:
            self.probe.unwatch(ref.uid)
        self.metrics.forget_pool(ref.namespace, ref.name)

    def refresh_interval(self, ref: PoolRef) -> float:
        """spec.refreshInterval when the pool sets one, else the operator's --refresh-interval."""
        raw = ref.spec.get("refreshInterval")
        try:
            seconds = parse_duration(raw) if isinstance(raw, str) else 0.0
        except ValueError:
            seconds = 0.0
        return seconds if seconds > 0 else self.settings.refresh_interval

    def refresh_due_in(self, ref: PoolRef) -> float:
        """Seconds until the pool's next refresh: an interval after its last operation ended."""
        pool = self.pool(ref)
        return pool.last_activity + self.refresh_interval(ref) - time.monotonic()

    def _config(self, ref: PoolRef, spec: SpotpoolSpec) -> StackConfig:
        """The pool's stack config: its spec, and the notice agent when notices are on."""
        return StackConfig.from_spec(ref.identity, spec, self.settings.notice_endpoint())

    def _watch(self, ref: PoolRef, pool: PoolState, credentials: Credentials, region: str) -> None:
        """Have the fleet probe watch the instances the pool's status now lists."""
        if self.probe is None:
            return
        expected = {i.slot: i.instance_id for i in pool.status.instances if i.slot is not None}

        def gone(slots: set[int]) -> None:
            pool.gone_slots |= slots
            pool.wake.set()

        self.probe.watch(ref.uid, credentials, region, expected, gone)

    # --- the pieces -----------------------------------------------------------------------------

    async def _up(
        self,
        pool: PoolState,
        ref: PoolRef,
        spec: SpotpoolSpec,
        config: StackConfig,
        reason: str,
        message: str,
        slots: list[int] | None = None,
    ) -> OperationResult:
        """`up`, or with `slots` the targeted replacement of just those slots."""
        started = self.clock()
        # Short of what was last applied, and no refresh just looked (a replacement cut short,
        # instances gone while no operator ran): the up looks at the cloud first, same run.
        last = pool.status
        short = not pool.replace_pending and len(last.instances) < last.replicas
        status = self._with_identity(pool.status, ref, spec)
        pool.status = status
        credentials = await self._credentials(pool, ref, spec, "up")
        password = await self._login_password(pool, ref, spec)
        await self._write(
            pool, ref, render.progressing(status, reason, message, ref.generation, started)
        )
        if spec.uses_inline_credentials() and pool.inline_warned != ref.generation:
            self.events.post(ref.event_ref(), "Warning", "InlineCredentials", INLINE_WARNING)
            pool.inline_warned = ref.generation
        engine = self._engine(ref, credentials, spec.region)
        if self.probe is not None:
            # The up may replace or delete instances itself: those are no reclaims. The watch
            # starts again on what the up leaves (a reclaim meanwhile is seen then).
            self.probe.unwatch(ref.uid)
        try:
            # Placed by stock; `pool.applied` keeps the spec's config, which is what changes.
            placed, replan = await self._placed(pool, spec, config, credentials, slots)
            if slots:
                if self.settings.fast_launch:  # launched now; the run below adopts them
                    await launch_ahead(engine, ref, placed, slots, password, pool.status)
                result = await self._engine_call(
                    "up", engine.replace_slots, placed, slots, password, replan
                )
            else:
                result = await self._engine_call("up", engine.up, placed, password, short, replan)
        except Exception as error:
            pool.applied = None  # a failed up may have changed part of the pool: redo any spec
            self._watch(ref, pool, credentials, spec.region)
            problem = classify(error)
            await self._fail(pool, ref, pool.status, "up", problem, started)
            raise problem from None
        pool.credentials, pool.applied, pool.converged_once = credentials, config, True
        pool.last_activity = time.monotonic()
        previous = pool.status
        status = render.converged(pool.status, result, ref.generation, started, self.clock())
        status = render.with_surges(status, result.surges)
        await self._write(pool, ref, status)
        self._watch(ref, pool, credentials, spec.region)
        self._post_recovered(ref, result)
        before = {i.instance_id for i in previous.instances}
        after = {i.instance_id for i in status.instances}
        if before != after or result.changes.update:
            self.events.post(
                ref.event_ref(),
                "Normal",
                "Converged",
                f"{status.ready_replicas} of {status.replicas} instances running "
                f"({len(after - before)} created, {len(before - after)} deleted) "
                f"in {result.seconds:.0f} s",
            )
        ref.logger.info(
            "up done in %.1f s: %d of %d running", result.seconds, status.ready_replicas,
            status.replicas,
        )  # fmt: skip
        return result

    def note_reclaimed(self, pool: PoolState, slots: Iterable[int]) -> None:
        """The cloud took these slots' instances (spot ones): placement avoids their zone x
        type for a while."""
        if self.capacity is not None:
            gone = set(slots)
            instances = [i for i in pool.status.instances if i.slot in gone]
            self.capacity.reclaimed(instances, ChargeType.SPOTPAID)

    async def _placed(
        self,
        pool: PoolState,
        spec: SpotpoolSpec,
        config: StackConfig,
        credentials: Credentials,
        slots: list[int] | None,
    ) -> tuple[StackConfig, Replan | None]:
        """`config` with its slots placed by stock (`slots`, or every slot without an
        instance), and where the engine sends slots the cloud then has no stock for."""
        if self.capacity is None:
            return config, None
        live = live_slots(pool.status.instances, spec.instance_charge_type)
        wanted = slots if slots else [s for s in range(config.count) if s not in live]
        try:
            placed = await asyncio.to_thread(
                self.capacity.plan, spec, config, live, wanted, credentials, spec.region,
                pool.back_to_spot,
            )  # fmt: skip
        except NoCapacity as error:
            raise PoolProblem(
                "ResourceInsufficient",
                f"no spot stock to place the pool's new instances: {error}; list more zones or "
                "instance types, or turn on spec.onDemandFallback",
            ) from None
        return placed, self.capacity.replanner(spec, credentials, spec.region)

    def _post_recovered(self, ref: PoolRef, result: OperationResult) -> None:
        """What the engine repaired: an Event for each terminated orphan, one for the rest."""
        terminated = [n for n in result.recovered if n.startswith("terminated orphaned")]
        left = [n for n in result.recovered if n.startswith("left orphaned")]
        rest = [n for n in result.recovered if n not in terminated and n not in left]
        for note in left:  # said again on every pass while it lasts: a log line, not an Event
            ref.logger.info("%s", note)
        for note in terminated:
            ref.logger.warning("%s", note)
            self.events.post(ref.event_ref(), "Warning", "OrphanTerminated", note[:1000])
        if rest:
            ref.logger.warning("recovered: %s", "; ".join(rest))
            self.events.post(ref.event_ref(), "Normal", "Recovered", "; ".join(rest)[:1000])

    def _with_identity(
        self, status: SpotpoolStatus, ref: PoolRef, spec: SpotpoolSpec
    ) -> SpotpoolStatus:
        backend = self.settings.engine.backend_for_display()
        status = render.identity(
            status, ref.name, ref.identity.stack_name, backend, spec.desired_count()
        )
        return render.inline_credentials(
            status, spec.uses_inline_credentials(), INLINE_WARNING, ref.generation, self.clock()
        )

    async def _spec(
        self, pool: PoolState, ref: PoolRef, kind: str, quiet: bool = False
    ) -> SpotpoolSpec:
        try:
            return SpotpoolSpec.model_validate(ref.spec)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}"
                for e in error.errors(include_url=False, include_input=False)
            )
            problem = PoolProblem("InvalidSpec", problems, permanent=True)
            if not quiet:
                await self._fail(pool, ref, pool.status, kind, problem, self.clock())
            raise problem from None

    async def _credentials(
        self, pool: PoolState, ref: PoolRef, spec: SpotpoolSpec, kind: str, quiet: bool = False
    ) -> Credentials:
        try:
            return await asyncio.to_thread(resolve, self.cluster, ref.namespace, spec)
        except Exception as error:
            problem = classify(error)
            if not quiet or degraded_reason(pool.status) != problem.reason:
                await self._fail(pool, ref, pool.status, kind, problem, self.clock())
            raise problem from None

    async def _login_password(
        self, pool: PoolState, ref: PoolRef, spec: SpotpoolSpec
    ) -> str | None:
        try:
            return await asyncio.to_thread(login_password, self.cluster, ref.namespace, spec)
        except Exception as error:
            problem = classify(error)
            await self._fail(pool, ref, pool.status, "up", problem, self.clock())
            raise problem from None

    def _engine(self, ref: PoolRef, credentials: Credentials, region: str) -> PoolEngine:
        logger = ref.logger

        def progress(line: str) -> None:
            # The pinned plugins are found on PATH on purpose: that warning is noise.
            quiet = "from $PATH" in line
            logger.log(logging.DEBUG if quiet else logging.INFO, "%s", line)

        return self.engine_factory(ref.identity, credentials, region, progress)

    async def _engine_call(
        self, kind: str, call: Callable[..., T], *args: Any, record: bool = True
    ) -> T:
        """Run one blocking engine call in the engine's threads, at most max_concurrent at once.

        `record`: count it in the operation metrics (not for look-ups that serve one).
        """
        engine = getattr(call, "__self__", None)
        uid: str | None = getattr(getattr(engine, "pool", None), "uid", None)
        if self.shards is not None and uid is not None and not self.shards.serves(uid):
            raise _not_served(self.shards, uid)  # another replica's pool now: hands off
        async with self._slot(self._priority(kind, uid), _account(engine)):
            self.metrics.in_flight.inc()
            started = time.monotonic()
            succeeded = False
            try:
                loop = asyncio.get_running_loop()
                value = await loop.run_in_executor(
                    self._executor, partial(self._guarded, uid, call, *args)
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
        self, priority: Priority = Priority.UPDATE, account: str = ""
    ) -> AsyncIterator[None]:
        """One of the engine slots (most urgent first, bounded per cloud account); counted as
        queued while waiting for it."""
        self.metrics.queued.inc()
        waiting = True
        try:
            async with self._slots.take(priority, account):
                self.metrics.queued.dec()
                waiting = False
                yield
        finally:
            if waiting:
                self.metrics.queued.dec()

    def _guarded(self, uid: str | None, call: Callable[..., T], *args: Any) -> T:
        """In the engine's thread: run only while the pool's shard is served, counted as its
        operation (a shard is given up only when its operations are over), and launch each
        Pulumi CLI only after checking the operation's fence (the shard still held, in the
        same epoch)."""
        if self.shards is None or uid is None:
            return call(*args)
        shards = self.shards
        with shards.operation(uid) as fence, fenced(partial(shards.check, fence)):
            stack = getattr(getattr(call, "__self__", None), "name", uid)
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

    def drop(self, uids: list[str]) -> None:
        """The pools' shard went to another replica: forget them here (no watch, no state)."""
        for uid in uids:
            pool = self.pools.pop(uid, None)
            if self.probe is not None:
                self.probe.unwatch(uid)
            if pool is not None:
                pool.wake.set()  # its daemon looks again: it waits for the shard now
            if pool is not None and pool.latest is not None:
                self.metrics.forget_pool(pool.latest.namespace, pool.latest.name)

    async def _fail(
        self,
        pool: PoolState,
        ref: PoolRef,
        status: SpotpoolStatus,
        kind: str,
        problem: PoolProblem,
        started: datetime,
    ) -> None:
        if not self.serving(ref):  # another replica's pool now: it reports, not this one
            ref.logger.info("%s stopped: %s", kind, problem.message)
            return
        repeated = degraded_reason(status) == problem.reason
        self.metrics.observe_failure(kind, problem.reason)
        failed = render.failed(
            status, kind, problem.reason, problem.message, ref.generation, started, self.clock()
        )
        pool.last_activity = time.monotonic()
        await self._write(pool, ref, failed)
        if not (repeated and kind == "refresh"):
            self.events.post(ref.event_ref(), "Warning", problem.reason, problem.message)
        ref.logger.warning("%s failed: %s: %s", kind, problem.reason, problem.message)

    async def _write(self, pool: PoolState, ref: PoolRef, status: SpotpoolStatus) -> None:
        before, pool.status = pool.status, status
        if not self.serving(ref):
            return  # the shard's new holder writes the status now
        self.metrics.observe_pool(ref.namespace, ref.name, status)
        self.metrics.observe_surges(before, status)
        try:
            await asyncio.to_thread(
                self.cluster.patch_status, ref.namespace, ref.name, render.to_patch(status)
            )
        except Exception as error:  # the next write carries the same fields: do not fail the op
            ref.logger.warning("could not write the status: %s", error)


def _not_served(shards: ShardLeases | None, uid: str | None) -> PoolProblem:
    shard = shards.shard(uid) if shards is not None and uid is not None else "?"
    return PoolProblem("NotServed", f"shard {shard} is served by another replica now")


def _account(engine: object) -> str:
    """The cloud account an engine call acts for (a digest of its SecretId, never the id)."""
    credentials = getattr(engine, "credentials", None)
    secret_id = getattr(credentials, "secret_id", None)
    if secret_id is None:
        return ""
    return hashlib.sha256(secret_id.get_secret_value().encode()).hexdigest()[:16]


def degraded_reason(status: SpotpoolStatus) -> str | None:
    found = render.condition(status, render.DEGRADED)
    return found.reason if found and found.status == "True" else None


def visible(status: SpotpoolStatus) -> dict[str, Any]:
    """The status without its last operation: what a person would notice changing."""
    return status.model_dump(exclude={"stack"})
