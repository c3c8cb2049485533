"""The shared machinery of the reconciler: what it holds per pool, and the engine runner —
one blocking engine call at a time per pool, a bounded number overall, the status written
around every operation, Events for what a person should know.

The kopf handlers (handlers.py) only translate; every decision is made in the reconciler's
modules (converge, reclaims, deletion), and every dependency (the engine, the cluster, events,
the clock) comes in from outside so the logic can be tested without any of them.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol, TypeVar

from pydantic import SecretStr, ValidationError

from spotpool.api.spec import SpotpoolSpec, parse_duration
from spotpool.api.stackconfig import PoolIdentity, StackConfig
from spotpool.api.status import SpotpoolStatus
from spotpool.engine.credentials import Credentials
from spotpool.engine.processes import kill_runs
from spotpool.engine.results import OperationResult
from spotpool_operator import status as render
from spotpool_operator.credentials import INLINE_WARNING, login_password, resolve
from spotpool_operator.events import Events
from spotpool_operator.failures import PoolProblem, classify
from spotpool_operator.fleet import FleetProbe
from spotpool_operator.kube import Cluster
from spotpool_operator.lease import OperatorLease
from spotpool_operator.metrics import Metrics
from spotpool_operator.pools import PoolRef, PoolState
from spotpool_operator.settings import OperatorSettings

T = TypeVar("T")


class PoolEngine(Protocol):
    """The part of `spotpool.engine.stack.PoolStack` the operator uses."""

    def up(
        self, config: StackConfig, login_password: str | None = None, refresh: bool = False
    ) -> OperationResult: ...

    def refresh(self) -> OperationResult: ...

    def replace_slots(
        self, config: StackConfig, slots: list[int], login_password: str | None = None
    ) -> OperationResult: ...

    def start_surge(
        self, config: StackConfig, slots: list[int], login_password: str | None = None
    ) -> OperationResult: ...

    def destroy(self, remove_stack: bool = True) -> OperationResult: ...

    def forget(self) -> None: ...

    def state_instance_ids(self) -> dict[int, str]: ...

    def applied_config(self) -> StackConfig | None: ...


EngineFactory = Callable[[PoolIdentity, Credentials, str, Callable[[str], None]], PoolEngine]
# Ids of the pool's live instances, straight from the cloud API (one cheap call, no Pulumi).
CloudLookup = Callable[[PoolIdentity, Credentials, str], set[str]]
NO_CREDENTIALS = Credentials(secret_id=SecretStr(""), secret_key=SecretStr(""))


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
        lease: OperatorLease | None = None,
    ) -> None:
        self.settings = settings
        self.cluster = cluster
        self.events = events
        self.metrics = metrics
        self.engine_factory = engine_factory
        self.cloud_lookup = cloud_lookup
        self.clock = clock
        self.probe = probe
        self.lease = lease
        self.pools: dict[str, PoolState] = {}
        self._slots = asyncio.Semaphore(settings.max_concurrent)
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
        try:
            if slots:
                result = await self._engine_call(
                    "up", engine.replace_slots, config, slots, password
                )
            else:
                result = await self._engine_call("up", engine.up, config, password, short)
        except Exception as error:
            pool.applied = None  # a failed up may have changed part of the pool: redo any spec
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
        if self.lease is not None and not self.lease.held():
            await self.lease.held_event.wait()  # only the Lease's holder writes stacks
        async with self._slot():
            self.metrics.in_flight.inc()
            started = time.monotonic()
            succeeded = False
            try:
                loop = asyncio.get_running_loop()
                value = await loop.run_in_executor(self._executor, partial(call, *args))
                succeeded = True
                return value
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
    async def _slot(self) -> AsyncIterator[None]:
        """One of the max_concurrent engine slots; counted as queued while waiting for it."""
        self.metrics.queued.inc()
        try:
            await self._slots.acquire()
        finally:
            self.metrics.queued.dec()
        try:
            yield
        finally:
            self._slots.release()

    async def _fail(
        self,
        pool: PoolState,
        ref: PoolRef,
        status: SpotpoolStatus,
        kind: str,
        problem: PoolProblem,
        started: datetime,
    ) -> None:
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
        pool.status = status
        self.metrics.observe_pool(ref.namespace, ref.name, status)
        try:
            await asyncio.to_thread(
                self.cluster.patch_status, ref.namespace, ref.name, render.to_patch(status)
            )
        except Exception as error:  # the next write carries the same fields: do not fail the op
            ref.logger.warning("could not write the status: %s", error)


def degraded_reason(status: SpotpoolStatus) -> str | None:
    found = render.condition(status, render.DEGRADED)
    return found.reason if found and found.status == "True" else None


def visible(status: SpotpoolStatus) -> dict[str, Any]:
    """The status without its last operation: what a person would notice changing."""
    return status.model_dump(exclude={"stack"})
