"""The engine runner: `PoolWork` is the reconciler's shared machinery — the engine-call
plumbing (engine_calls.py), the pool bookkeeping and status writes (pool_book.py), and here the
`up` every job builds on (a whole up, or the targeted replacement of some slots), placed by
stock, with what the engine repaired reported.

The kopf handlers (handlers.py) only translate; every decision is made in the reconciler's
modules (converge, reclaims, deletion), and every dependency (the engine, the cluster, events,
the clock) comes in from outside so the logic can be tested without any of them.
"""

import asyncio
import time
from collections.abc import Callable, Iterable
from functools import partial

from spotpool.api.drift import describe_all
from spotpool.api.interruptions import OfferingKey
from spotpool.api.placement import NoCapacity
from spotpool.api.spec import ChargeType, SpotpoolSpec
from spotpool.api.stackconfig import StackConfig
from spotpool.api.status import SpotpoolStatus
from spotpool.engine.basics.results import OperationResult
from spotpool.engine.stacks.rollout import renew_slots
from spotpool.engine.stacks.stack import PoolStack
from spotpool.engine.tencent.credentials import Credentials
from spotpool_operator.basics.credentials import INLINE_WARNING
from spotpool_operator.basics.failures import PoolProblem, classify
from spotpool_operator.basics.pools import PoolRef, PoolState
from spotpool_operator.cloud.capacity import Replan, account_of, live_slots
from spotpool_operator.convergence.engine_types import (
    NO_CREDENTIALS,
    CloudLookup,
    EngineFactory,
    PoolEngine,
)
from spotpool_operator.convergence.fast_path import launch_ahead
from spotpool_operator.convergence.node_hooks import NodeHooks
from spotpool_operator.convergence.pool_book import degraded_reason, visible
from spotpool_operator.reporting import drift as drift_status
from spotpool_operator.reporting import status as render

__all__ = [
    "NO_CREDENTIALS",
    "CloudLookup",
    "EngineFactory",
    "PoolEngine",
    "PoolWork",
    "degraded_reason",
    "visible",
]


class PoolWork(NodeHooks):
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
        held: frozenset[int] = frozenset(),
        renew: bool = False,
    ) -> OperationResult:
        """`up`, or with `slots` the targeted replacement of just those slots (`held`: those a
        live instance of the pool holds, the status behind: not launched ahead; `renew`: their
        instances still run and go first, rollout.renew_slots)."""
        started = self.clock()
        # Short of what was last applied, and no refresh just looked (a replacement cut short,
        # instances gone while no operator ran): the up looks at the cloud first, same run.
        last = pool.status
        short = not pool.replace_pending and len(last.instances) < last.replicas
        status = self._with_identity(pool.status, ref, spec)
        pool.status = status
        credentials = await self._credentials(pool, ref, spec, "up")
        password = await self._login_password(pool, ref, spec)
        progressing = render.progressing(status, reason, message, ref.generation, started)
        ahead = bool(slots) and self.settings.fast_launch and not renew
        if not ahead:  # else after the launch: a storm's launches wait for no status write
            await self._write(pool, ref, progressing)
        if spec.uses_inline_credentials() and pool.inline_warned != ref.generation:
            self.events.post(ref.event_ref(), "Warning", "InlineCredentials", INLINE_WARNING)
            pool.inline_warned = ref.generation
        engine = self._engine(ref, credentials, spec.region)
        if self.probe is not None:
            # The up may replace or delete instances itself: those are no reclaims. The watch
            # starts again on what the up leaves (a reclaim meanwhile is seen then).
            self.probe.unwatch(ref.uid)
        try:
            # Reserved against the namespace's limits before anything is launched (a whole up is
            # cut to what was granted; a replacement stays within what the pool reserved).
            reserved, _ = await self._reserved(pool, ref, spec, config, credentials)
            config = config if slots else reserved
            if config.count < pool.status.replicas:  # the status says what it converges to
                pool.status = pool.status.model_copy(update={"replicas": config.count})
            # Placed by stock; `pool.applied` keeps the spec's config, which is what changes.
            placed, replan = await self._placed(pool, spec, config, credentials, slots)
            if slots:
                if ahead:  # launched now; the run below adopts them
                    guarded = partial(self._guarded, ref.uid, engine)  # the shard's fence
                    if held:  # a stale status (a run cut short): the run below looks first
                        ref.logger.info(
                            "not launched ahead: slot(s) %s held by a live instance of the "
                            "pool the status does not list yet", sorted(held)
                        )  # fmt: skip
                    fast = [s for s in slots if s not in held]
                    await launch_ahead(engine, ref, placed, fast, password, pool.status, guarded)
                    await self._write(pool, ref, progressing)
                replace = _renewing(engine) if renew else engine.replace_slots
                result = await self._engine_call(
                    "up", replace, placed, slots, password, replan, engine=engine
                )
            else:
                await self.drain_going(ref, spec.nodes, placed, "scale-down")  # spec.nodes: first
                up = self._up_call(engine, pool, ref, spec, config)
                result = await self._engine_call(
                    "up", up, placed, password, short, replan, engine=engine
                )
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
        status = self._drift_after_up(ref, previous, status, slots)
        await self._write(pool, ref, status)
        await self._settle(pool, ref, spec, config.count, credentials)
        self._watch(ref, pool, credentials, spec.region)
        self._post_recovered(ref, result)
        before = {i.instance_id for i in previous.instances}
        after = {i.instance_id for i in status.instances}
        if renew or not slots:  # terminated by this up (drained before): their Nodes go now
            why = "its node was not Ready in time" if renew else "scale-down or rollout"
            await self.nodes_gone(ref, sorted(before - after), why)
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

    async def _grow_if_allowed(
        self, pool: PoolState, ref: PoolRef, spec: SpotpoolSpec, note: str
    ) -> bool:
        """Under the pool's lock, `spec` just held at the limits (`note`: the Limited message
        before): an up when a held pool may grow now, its spec otherwise as applied (a raised
        limit, another pool gone); True when one ran. A Limited message that moved is written."""
        config, applied = self._config(ref, spec), pool.applied
        if spec.paused or applied is None:
            return False
        if config.count > applied.count and (
            config.model_copy(update={"count": applied.count}) == applied
        ):
            message = f"the namespace's limits allow {config.count} instances now"
            await self._up(pool, ref, spec, config, "Converging", message)
            return True
        if pool.limit_note != note:  # still held, by what holds it now
            await self._write(pool, ref, pool.status)
        return False

    def _drift_after_up(
        self,
        ref: PoolRef,
        previous: SpotpoolStatus,
        status: SpotpoolStatus,
        slots: list[int] | None,
    ) -> SpotpoolStatus:
        """A whole up set every instance back to what the spec says: the drift is gone (an
        Event names what it restored). A targeted one replaced only `slots`."""
        now = self.clock()
        if slots:
            return drift_status.without_slots(status, set(slots), ref.generation, now)
        if not previous.drift:
            return status
        restored = describe_all(previous.drift)
        self.events.post(
            ref.event_ref(), "Normal", "DriftCorrected", f"restored: {restored}"[:1000]
        )
        return drift_status.undrifted(
            status, "Corrected", f"the up restored: {restored}", ref.generation, now
        )

    def _up_call(
        self, engine: PoolEngine, pool: PoolState, ref: PoolRef, spec: SpotpoolSpec,
        config: StackConfig,
    ) -> Callable[..., OperationResult]:  # fmt: skip
        """The engine's `up`; converge.py rolls a spec change out in batches (spec.disruption)."""
        return engine.up

    def note_reclaimed(self, pool: PoolState, slots: Iterable[int]) -> None:
        """The cloud took these slots' instances (spot ones): placement avoids their zone x
        type for a while, and learns an interruption there."""
        if self.capacity is not None:
            gone = set(slots)
            instances = [i for i in pool.status.instances if i.slot in gone]
            self.capacity.reclaimed(instances, ChargeType.SPOTPAID, self.where(pool))

    def where(self, pool: PoolState) -> tuple[str, str] | None:
        """(account digest, region) of a pool, once its credentials worked."""
        region = pool.latest.spec.get("region") if pool.latest is not None else None
        if pool.credentials is None or not isinstance(region, str):
            return None
        return account_of(pool.credentials, self.settings.engine.cloud_endpoint), region

    def running_spot(self) -> dict[OfferingKey, int]:
        """Spot instances running now per (account, region, zone, type), over every pool
        served: the instance-hours the learned rates divide by."""
        running: dict[OfferingKey, int] = {}
        for pool in list(self.pools.values()):
            where = self.where(pool)
            if where is None:
                continue
            for i in pool.status.instances:
                spot = (i.charge_type or ChargeType.SPOTPAID) == ChargeType.SPOTPAID
                if spot and i.state == "RUNNING" and i.zone and i.instance_type:
                    key = (*where, i.zone, i.instance_type)
                    running[key] = running.get(key, 0) + 1
        return running

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
                pool.back_to_spot, partial(setattr, pool, "placement"),
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


def _renewing(engine: PoolEngine) -> Callable[..., OperationResult]:
    """Slots whose instance runs but must go (rollout.renew_slots); an engine that is not a
    Pulumi stack (the tests') replaces them as it replaces gone ones."""
    return partial(renew_slots, engine) if isinstance(engine, PoolStack) else engine.replace_slots
