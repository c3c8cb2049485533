"""Keep each pool converged: one engine operation per pool at a time, a bounded number overall,
status written around every operation, Events for what a person should know.

The kopf handlers (handlers.py) only translate; every decision is made here, and every
dependency (the engine, the cluster, events, the clock) comes in from outside so the logic can
be tested without any of them.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol, TypeVar

from pydantic import SecretStr, ValidationError

from spotpool.api.spec import DeletionPolicy, SpotpoolSpec, parse_duration
from spotpool.api.stackconfig import PoolIdentity, StackConfig
from spotpool.api.status import SpotpoolStatus
from spotpool.engine import cloud_errors
from spotpool.engine.credentials import Credentials
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

    def up(self, config: StackConfig, login_password: str | None = None) -> OperationResult: ...

    def refresh(self) -> OperationResult: ...

    def replace_slots(
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


class Reconciler:
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
        self._executor.shutdown(wait=False, cancel_futures=True)

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

    # --- create / update / resume ---------------------------------------------------------

    async def converge(self, ref: PoolRef) -> OperationResult | None:
        """`up` the pool to `ref`'s spec. Requests arriving while an operation runs coalesce:
        the first to get the pool runs one `up` with the newest spec, the rest find it done."""
        pool = self.pool(ref)
        pool.latest = ref
        pool.requested += 1
        ticket = pool.requested
        async with pool.lock:
            if pool.covered >= ticket:
                ref.logger.info("coalesced into an up that already ran with a newer spec")
                return None
            ref, started_at = pool.latest or ref, pool.requested
            spec = await self._spec(pool, ref, "up")
            if spec.paused:
                await self._write(
                    pool, ref, render.paused(pool.status, ref.generation, self.clock())
                )
                pool.covered = max(pool.covered, started_at)
                return None
            config = StackConfig.from_spec(ref.identity, spec)
            if pool.applied is None and not pool.converged_once:
                await self._adopt_applied(pool, ref, spec, config)
            if config == pool.applied and not pool.replace_pending:
                ref.logger.info("spec already applied; nothing to do")
                status = render.observed(
                    self._with_identity(pool.status, ref, spec),
                    spec.desired_count(),
                    ref.generation,
                    self.clock(),
                )
                if status != pool.status:
                    await self._write(pool, ref, status)
                pool.covered = max(pool.covered, started_at)
                return None
            result = await self._up(pool, ref, spec, config, "Converging", "running up")
            pool.covered = max(pool.covered, started_at)
            return result

    async def _adopt_applied(
        self, pool: PoolState, ref: PoolRef, spec: SpotpoolSpec, config: StackConfig
    ) -> None:
        """After a restart: when the stack's last up applied exactly this spec, take it as
        applied (no `up` to run) and start watching the pool's instances at once."""
        if not pool.status.instances:
            return  # nothing was ever applied here, or the status was lost: run the up
        try:
            credentials = await asyncio.to_thread(resolve, self.cluster, ref.namespace, spec)
            engine = self._engine(ref, credentials, spec.region)
            applied = await self._engine_call("resume", engine.applied_config, record=False)
        except Exception as error:  # the up that follows says what is wrong
            ref.logger.info("could not read the stack's last config: %s", type(error).__name__)
            return
        if applied != config.redacted() or not pool.status.instances:
            return
        ref.logger.info("the stack already applied this spec: no up on resume")
        pool.applied, pool.credentials, pool.converged_once = config, credentials, True
        pool.last_activity = time.monotonic()
        self._watch(ref, pool, credentials, spec.region)

    # --- the fleet probe: reclaims seen as they happen ----------------------------------------

    def _watch(self, ref: PoolRef, pool: PoolState, credentials: Credentials, region: str) -> None:
        """Have the fleet probe watch the instances the pool's status now lists."""
        if self.probe is None:
            return
        expected = {i.slot: i.instance_id for i in pool.status.instances if i.slot is not None}

        def gone(slots: set[int]) -> None:
            pool.gone_slots |= slots
            pool.wake.set()

        self.probe.watch(ref.uid, credentials, region, expected, gone)

    async def replace_gone(self, ref: PoolRef) -> None:
        """The probe saw instances gone: say so and replace exactly those slots in one engine
        run (no full refresh, no full up)."""
        pool = self.pool(ref)
        async with pool.lock:
            gone, pool.gone_slots = pool.gone_slots, set()
            pool.wake.clear()
            spec = await self._spec(pool, ref, "up", quiet=True)
            if not gone or spec.paused:
                return
            seen_at = time.monotonic()
            before = {i.slot: i.instance_id for i in pool.status.instances}
            gone = {slot for slot in gone if slot in before}
            if not gone:
                return
            names = ", ".join(f"slot {s} ({before[s]})" for s in sorted(gone))
            self.metrics.reclaims.labels(ref.namespace, ref.name).inc(len(gone))
            self.events.post(
                ref.event_ref(),
                "Warning",
                "Reclaimed",
                f"the cloud reclaimed {len(gone)} instance(s): {names}; replacing",
            )
            ref.logger.warning("reclaimed: %s", names)
            pool.status = render.reclaimed(pool.status, gone, self.clock())
            pool.replace_pending, pool.reclaimed_at = True, seen_at
            config = StackConfig.from_spec(ref.identity, spec)
            if config != pool.applied:
                await self._replace(pool, ref, spec)  # the spec moved too: a full up
                return
            await self._replace(pool, ref, spec, slots=sorted(gone))

    # --- the timer: reclaims ----------------------------------------------------------------

    async def check_reclaims(self, ref: PoolRef) -> None:
        """Refresh the pool; when the cloud took instances away, say so and replace them."""
        pool = self.pool(ref)
        if pool.lock.locked() or not pool.converged_once:
            pool.last_activity = time.monotonic()  # busy, or nothing to refresh yet: next interval
            return
        async with pool.lock:
            pool.last_activity = time.monotonic()
            spec = await self._spec(pool, ref, "refresh", quiet=True)
            if spec.paused:
                return
            started = self.clock()
            if not pool.replace_pending:
                credentials = await self._credentials(pool, ref, spec, "refresh", quiet=True)
                if await self._cloud_agrees(pool, ref, credentials, spec.region):
                    return
                engine = self._engine(ref, credentials, spec.region)
                before = {i.slot: i.instance_id for i in pool.status.instances}
                try:
                    result = await self._engine_call("refresh", engine.refresh)
                except Exception as error:
                    await self._fail(pool, ref, pool.status, "refresh", classify(error), started)
                    raise classify(error) from None
                await self._after_refresh(pool, ref, result, before, started)
            if pool.replace_pending:
                await self._replace(pool, ref, spec)

    async def _cloud_agrees(
        self, pool: PoolState, ref: PoolRef, credentials: Credentials, region: str
    ) -> bool:
        """True when one look at the cloud shows every instance of the status still alive.

        A Pulumi refresh costs a CLI and a provider process; this costs one DescribeInstances.
        Every `full_refresh_every`-th check refreshes anyway, to catch any other drift.
        """
        pool.checks += 1
        every = self.settings.full_refresh_every
        if self.cloud_lookup is None or (every and pool.checks % every == 0):
            return False
        expected = {i.instance_id for i in pool.status.instances}
        if len(expected) < pool.status.replicas:
            return False  # short: let refresh and up look at it
        try:
            alive = await asyncio.to_thread(self.cloud_lookup, ref.identity, credentials, region)
        except Exception as error:
            code = str(getattr(error, "code", "") or error)
            if cloud_errors.is_throttled(code):
                # Throttled: a full refresh would make ~5 calls per instance. Back off instead.
                raise PoolProblem(
                    "Throttled", f"the quick cloud check was throttled ({code}); backing off"
                ) from None
            ref.logger.info("quick cloud check failed (%s); refreshing", type(error).__name__)
            return False  # the full refresh will say what is wrong
        if expected <= alive:
            pool.last_activity = time.monotonic()
            return True
        ref.logger.info("instances missing in the cloud: %s", ", ".join(sorted(expected - alive)))
        return False

    async def _after_refresh(
        self,
        pool: PoolState,
        ref: PoolRef,
        result: OperationResult,
        before: dict[int | None, str],
        started: datetime,
    ) -> None:
        self._post_recovered(ref, result)
        status = render.refreshed(pool.status, result, started, self.clock())
        if result.gone_slots:
            gone = ", ".join(
                f"slot {slot} ({before.get(slot, 'unknown instance')})"
                for slot in result.gone_slots
            )
            count = len(result.gone_slots)
            self.metrics.reclaims.labels(ref.namespace, ref.name).inc(count)
            self.events.post(
                ref.event_ref(),
                "Warning",
                "Reclaimed",
                f"the cloud reclaimed {count} instance(s): {gone}; replacing",
            )
            ref.logger.warning("reclaimed: %s", gone)
            pool.replace_pending, pool.reclaimed_at = True, time.monotonic()
            await self._write(pool, ref, status)
        elif result.orphan_slots:  # a run died after creating them: the next up adopts them
            pool.replace_pending = True
            await self._write(pool, ref, status)
        elif _visible(status) != _visible(pool.status):
            await self._write(pool, ref, status)
        else:
            pool.status = status  # only lastOperation moved: not worth a write per interval
        pool.last_activity = time.monotonic()

    async def _replace(
        self, pool: PoolState, ref: PoolRef, spec: SpotpoolSpec, slots: list[int] | None = None
    ) -> None:
        before = {i.slot: i.instance_id for i in pool.status.instances}
        config = StackConfig.from_spec(ref.identity, spec)
        result = await self._up(
            pool, ref, spec, config, "Replacing", "replacing reclaimed slots", slots=slots
        )
        new = [i for i in result.instances if before.get(i.slot) != i.instance_id]
        if new:
            self.events.post(
                ref.event_ref(),
                "Normal",
                "Replaced",
                "replaced reclaimed instance(s): "
                + ", ".join(f"slot {i.slot} now {i.instance_id}" for i in new),
            )
        if pool.reclaimed_at is not None:
            self.metrics.reclaim_to_replaced.observe(time.monotonic() - pool.reclaimed_at)
        pool.replace_pending, pool.reclaimed_at = False, None

    # --- delete -------------------------------------------------------------------------------

    async def delete(self, ref: PoolRef) -> None:
        """The finalizer: destroy the stack (Delete) or forget it and keep the instances."""
        pool = self.pool(ref)
        async with pool.lock:
            retain = ref.spec.get("deletionPolicy") == DeletionPolicy.RETAIN.value
            if ref.spec.get("paused"):
                raise PoolProblem(
                    "Paused",
                    "spec.paused is true, so the pool is left as it is and deletion waits: "
                    "set paused to false to let it finish",
                )
            started = self.clock()
            verb = "forgetting the stack, keeping the instances" if retain else "destroying"
            status = render.progressing(pool.status, "Deleting", verb, ref.generation, started)
            await self._write(pool, ref, status)
            region = str(ref.spec.get("region") or "")
            credentials, problem = await self._deletion_credentials(pool, ref)
            engine = self._engine(ref, credentials, region)
            try:
                if retain:
                    kept = await self._engine_call(
                        "forget", engine.state_instance_ids, record=False
                    )
                    await self._engine_call("forget", engine.forget)
                    message = f"stack forgotten; {len(kept)} instance(s) kept" + (
                        f": {', '.join(kept.values())}" if kept else ""
                    )
                    self.events.post(ref.event_ref(), "Normal", "Retained", message)
                else:
                    owned = await self._engine_call(
                        "destroy", engine.state_instance_ids, record=False
                    )
                    if problem is not None and owned:
                        # Instances to delete, and no key pair to do it with: wait, and say
                        # how to end it either way.
                        raise PoolProblem(
                            problem.reason,
                            f"{problem.message}. The stack still holds {len(owned)} instance(s) "
                            f"({', '.join(owned.values())}) and deleting them needs the key pair: "
                            "restore it, or set spec.deletionPolicy to Retain to finish deleting "
                            "and leave the instances running",
                        )
                    if problem is not None:  # an empty stack: nothing in the cloud to delete
                        await self._engine_call("destroy", engine.forget)
                        self.events.post(
                            ref.event_ref(),
                            "Normal",
                            "Destroyed",
                            f"the stack held no instance; removed it without cloud credentials "
                            f"({problem.reason})",
                        )
                        self.forget(ref)
                        return
                    result = await self._engine_call("destroy", engine.destroy)
                    self.events.post(
                        ref.event_ref(),
                        "Normal",
                        "Destroyed",
                        f"deleted {result.changes.delete} resource(s) and the stack",
                    )
            except Exception as error:
                found = classify(error)
                await self._fail(pool, ref, pool.status, "destroy", found, started)
                raise found from None
        self.forget(ref)

    async def _deletion_credentials(
        self, pool: PoolState, ref: PoolRef
    ) -> tuple[Credentials, PoolProblem | None]:
        """The key pair to delete with: the resource's, else the last that worked here.

        With neither, the problem comes back too: deleting can go on only if the stack holds
        no instance (the Secret may be gone first when a whole namespace is deleted).
        """
        try:
            spec = SpotpoolSpec.model_validate(ref.spec)
            credentials = await asyncio.to_thread(resolve, self.cluster, ref.namespace, spec)
            return credentials, None
        except (PoolProblem, ValidationError) as error:
            if pool.credentials is not None:
                return pool.credentials, None
            return NO_CREDENTIALS, classify(error)

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
                result = await self._engine_call("up", engine.up, config, password)
        except Exception as error:
            pool.applied = None  # a failed up may have changed part of the pool: redo any spec
            problem = classify(error)
            await self._fail(pool, ref, pool.status, "up", problem, started)
            raise problem from None
        pool.credentials, pool.applied, pool.converged_once = credentials, config, True
        pool.last_activity = time.monotonic()
        previous = pool.status
        status = render.converged(pool.status, result, ref.generation, started, self.clock())
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
            if not quiet or _degraded_reason(pool.status) != problem.reason:
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
        async with self._slots:
            self.metrics.in_flight.inc()
            started = time.monotonic()
            succeeded = False
            try:
                loop = asyncio.get_running_loop()
                value = await loop.run_in_executor(self._executor, partial(call, *args))
                succeeded = True
                return value
            finally:
                self.metrics.in_flight.dec()
                if record:
                    self.metrics.observe_operation(kind, succeeded, time.monotonic() - started)

    async def _fail(
        self,
        pool: PoolState,
        ref: PoolRef,
        status: SpotpoolStatus,
        kind: str,
        problem: PoolProblem,
        started: datetime,
    ) -> None:
        repeated = _degraded_reason(status) == problem.reason
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


def _degraded_reason(status: SpotpoolStatus) -> str | None:
    found = render.condition(status, render.DEGRADED)
    return found.reason if found and found.status == "True" else None


def _visible(status: SpotpoolStatus) -> dict[str, Any]:
    """The status without its last operation: what a person would notice changing."""
    return status.model_dump(exclude={"stack"})
