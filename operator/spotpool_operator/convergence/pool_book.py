"""What the reconciler keeps per pool and what it reports: the pool's state, its refresh
timing and fleet-probe watch, its spec/credentials read with the failure reported, and the
status written (and Events posted) around every operation."""

import asyncio
import time
from datetime import datetime
from functools import partial
from typing import Any

from pydantic import ValidationError

from spotpool.api.spec import SpotpoolSpec, parse_duration
from spotpool.api.stackconfig import StackConfig
from spotpool.api.status import SpotpoolStatus
from spotpool.engine.leftovers.accounts import account_of
from spotpool.engine.tencent.credentials import Credentials
from spotpool_operator.basics.credentials import INLINE_WARNING, login_password, resolve
from spotpool_operator.basics.failures import PoolProblem, classify
from spotpool_operator.basics.pools import PoolRef, PoolState
from spotpool_operator.cloud.strays import StraySweep
from spotpool_operator.convergence.limit_gates import LimitGates
from spotpool_operator.reporting import status as render
from spotpool_operator.reporting.status_write import Fence, StaleWrite


class PoolBook(LimitGates):
    strays: StraySweep | None = None  # the sweep of deleted pools' instances (runner.py)

    # --- bookkeeping ----------------------------------------------------------------------

    def pool(self, ref: PoolRef) -> PoolState:
        state = self.pools.get(ref.uid)
        if state is None:
            state = PoolState(status=render.parse(ref.status))
            if state.status.writer is not None:
                state.status_writer = state.status.writer.model_dump(mode="json", by_alias=True)
            state.checkpoints = self.unwritten_checkpoints.pop(ref.uid, [])
            self.pools[ref.uid] = state
        return state

    def forget(self, ref: PoolRef) -> None:
        self.pools.pop(ref.uid, None)
        self.unwritten_checkpoints.pop(ref.uid, None)
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
        """Have the fleet probe watch the instances the pool's status now lists (and the sweep
        of deleted pools' instances look at its key pair and region)."""
        if self.strays is not None:
            record = account_of(ref.namespace, ref.spec, region)
            self.strays.remember(credentials, region, record, ref.identity)
        if self.probe is None:
            return
        expected = {i.slot: i.instance_id for i in pool.status.instances if i.slot is not None}

        def gone(slots: set[int]) -> None:
            pool.gone_slots |= slots
            pool.wake.set()

        def held(slots: set[int]) -> None:  # nothing to launch ahead: the run settles them
            pool.held_slots |= slots

        self.probe.watch(ref.uid, credentials, region, expected, gone, held)

    def drop(self, uids: list[str]) -> None:
        """The pools' shard went to another replica: forget them here (no watch, no state), but
        keep the onNotice results answered 'recorded' and not yet written (it may come back)."""
        for uid in uids:
            pool = self.pools.pop(uid, None)
            if pool is not None and pool.checkpoints:  # promised to the agents: kept
                self.unwritten_checkpoints.setdefault(uid, []).extend(pool.checkpoints)
            if self.probe is not None:
                self.probe.unwatch(uid)
            if pool is not None:
                pool.released = True
                pool.wake.set()  # its daemon looks again: it waits for the shard now
            if pool is not None and pool.latest is not None:
                self.metrics.forget_pool(pool.latest.namespace, pool.latest.name)

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
            spec = SpotpoolSpec.model_validate(ref.spec)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}"
                for e in error.errors(include_url=False, include_input=False)
            )
            problem = PoolProblem("InvalidSpec", problems, permanent=True)
            if not quiet:
                await self._fail(pool, ref, pool.status, kind, problem, self.clock())
            raise problem from None
        return await self._within_limits(pool, ref, spec)

    async def _resolve(self, ref: PoolRef, spec: SpotpoolSpec) -> Credentials:
        """The pool's credentials as its spec and the access policies say (off the loop: it
        reads Secrets and may call STS)."""
        return await asyncio.to_thread(
            resolve,
            self.cluster,
            ref.namespace,
            ref.name,
            spec,
            self.settings.engine.cloud_endpoint,
        )

    async def _credentials(
        self, pool: PoolState, ref: PoolRef, spec: SpotpoolSpec, kind: str, quiet: bool = False
    ) -> Credentials:
        try:
            return await self._resolve(ref, spec)
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
        if self.prices is not None and self.serving(ref):  # what its instances cost now
            status = await self.prices.price_async(status, pool.credentials, ref.spec, pool.status)
        if pool.placement is not None and status.placement != pool.placement:
            status = status.model_copy(update={"placement": pool.placement})
        status = render.limited(status, pool.limit_note, ref.generation, self.clock())
        before, pool.status = pool.status, status
        if not self.serving(ref):
            return  # the shard's new holder writes the status now
        self.metrics.observe_pool(ref.namespace, ref.name, status)
        self.metrics.observe_surges(before, status)
        fence = None
        if self.shards is not None:
            writer = self.shards.writer(ref.uid)
            fence = Fence(writer, pool.status_writer, partial(self.serving, ref))
        try:
            stored = await asyncio.to_thread(
                self.cluster.patch_status, ref.namespace, ref.name, render.to_patch(status), fence
            )
            pool.status_writer = stored or pool.status_writer
            pool.written_checkpoints |= {c.instance_id for c in status.notices.checkpoints}
        except StaleWrite as stale:  # a newer holder of the shard wrote: its status stands
            pool.status_writer = stale.seen
            ref.logger.info("status not written: %s", stale)
        except Exception as error:  # the next write carries the same fields: do not fail the op
            ref.logger.warning("could not write the status: %s", error)


def degraded_reason(status: SpotpoolStatus) -> str | None:
    found = render.condition(status, render.DEGRADED)
    return found.reason if found and found.status == "True" else None


def visible(status: SpotpoolStatus) -> dict[str, Any]:
    """The status without its last operation: what a person would notice changing."""
    return status.model_dump(exclude={"stack"})
