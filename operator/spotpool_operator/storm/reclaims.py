"""Reclaims: the fleet probe's gone slots replaced in one targeted engine run at once, and the
timer's check (one cloud call, a full Pulumi refresh every so often) for everything else."""

import asyncio
import time
from datetime import datetime

from spotpool.api.drift import InstanceDrift, describe_all
from spotpool.api.spec import DriftPolicy, SpotpoolSpec
from spotpool.api.status import SpotpoolStatus
from spotpool.engine.basics.results import OperationResult
from spotpool.engine.tencent import cloud_errors
from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.recent_writes import RECENT
from spotpool_operator.basics.failures import PoolProblem, classify
from spotpool_operator.basics.pools import PoolRef, PoolState
from spotpool_operator.convergence.engine_runner import PoolWork, visible
from spotpool_operator.reporting import drift as drift_status
from spotpool_operator.reporting import status as render


class Reclaims(PoolWork):
    # --- the fleet probe: reclaims seen as they happen ----------------------------------------

    async def replace_gone(self, ref: PoolRef) -> None:
        """The probe saw instances gone: say so and replace exactly those slots in one engine
        run (no full refresh, no full up)."""
        pool = self.pool(ref)
        async with pool.lock:
            gone, pool.gone_slots = pool.gone_slots, set()
            held, pool.held_slots = frozenset(pool.held_slots & gone), set()
            pool.wake.clear()
            spec = await self._spec(pool, ref, "up", quiet=True)
            if not gone or spec.paused:
                return
            seen_at = time.monotonic()
            before = {i.slot: i.instance_id for i in pool.status.instances}
            gone = {slot for slot in gone if slot in before}
            if not gone:
                return
            # Held by a live instance and no surge: a run cut short replaced it, not the cloud.
            reclaimed = gone - (held - {surge.slot for surge in pool.status.surges})
            if reclaimed:
                names = ", ".join(f"slot {s} ({before[s]})" for s in sorted(reclaimed))
                self.metrics.observe_reclaims(ref.namespace, ref.name, pool.status, reclaimed)
                self.events.post(
                    ref.event_ref(),
                    "Warning",
                    "Reclaimed",
                    f"the cloud reclaimed {len(reclaimed)} instance(s): {names}; replacing",
                )
                ref.logger.warning("reclaimed: %s", names)
                self.note_reclaimed(pool, reclaimed)
                await self.nodes_gone(ref, [before[s] for s in sorted(reclaimed)])
                pool.status = render.reclaimed(pool.status, reclaimed, self.clock())
            pool.replace_pending, pool.reclaimed_at = True, seen_at if reclaimed else None
            config = self._config(ref, spec)
            if config != pool.applied:
                await self._replace(pool, ref, spec)  # the spec moved too: a full up
                return
            await self._replace(pool, ref, spec, slots=sorted(gone), held=held)

    # --- the timer: reclaims ----------------------------------------------------------------

    async def check_reclaims(self, ref: PoolRef) -> None:
        """Refresh the pool; when the cloud took instances away, say so and replace them."""
        pool = self.pool(ref)
        if pool.lock.locked() or not pool.converged_once:
            pool.last_activity = time.monotonic()  # busy, or nothing to refresh yet: next interval
            return
        async with pool.lock:
            pool.last_activity = time.monotonic()
            note = pool.limit_note
            spec = await self._spec(pool, ref, "refresh", quiet=True)
            if spec.paused:
                return
            if await self._grow_if_allowed(pool, ref, spec, note):
                return  # a held pool grew (its limit was raised): that up looked at the cloud
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
                await self._after_refresh(pool, ref, result, before, started, spec.drift_policy)
                if result.drift and not pool.replace_pending:
                    if spec.drift_policy == DriftPolicy.CORRECT:
                        await self._correct_drift(pool, ref, spec)
                    return  # Report: no up; the instances stay as found
            if pool.replace_pending:
                await self._replace(pool, ref, spec, slots=self._keeping_drift(pool, ref, spec))

    async def _cloud_agrees(
        self, pool: PoolState, ref: PoolRef, credentials: Credentials, region: str
    ) -> bool:
        """True when one look at the cloud shows every instance of the status still alive.

        A Pulumi refresh costs a CLI and a provider process; this costs one DescribeInstances,
        or nothing when the fleet probe looked at the pool within the interval (it reports
        every gone instance itself). Every `full_refresh_every`-th check refreshes anyway, to
        catch any other drift.
        """
        pool.checks += 1
        every = self.settings.full_refresh_every
        if self.cloud_lookup is None or (every and pool.checks % every == 0):
            return False
        expected = {i.instance_id for i in pool.status.instances}
        if len(expected) < pool.status.replicas:
            return False  # short: let refresh and up look at it
        if self.probe is not None and self.probe.vouches_for(ref.uid, self.refresh_interval(ref)):
            pool.last_activity = time.monotonic()
            return True
        if self.probe is not None and (wait := self.probe.failing(ref.uid)) > 0:
            # The probe's look at this account and region failed: every pool asking again (or
            # refreshing, ~5 calls an instance) would only deepen it. Back off with the probe.
            raise PoolProblem(
                "CloudCheckFailed",
                f"the fleet probe's look at the cloud failed; looking again in {wait:.0f} s",
            )
        try:
            alive = await asyncio.to_thread(self.cloud_lookup, ref.identity, credentials, region)
        except Exception as error:
            code = str(getattr(error, "code", "") or error)
            if cloud_errors.is_throttled(code):
                # Throttled: a full refresh would make ~5 calls per instance. Back off instead.
                raise PoolProblem(
                    "Throttled", f"the quick cloud check was throttled ({code}); backing off"
                ) from None
            # A failed look says nothing of the instances: back off (the periodic full refresh
            # still comes every full_refresh_every-th check) rather than refresh every pool.
            raise PoolProblem(
                "CloudCheckFailed",
                f"the quick cloud check failed ({type(error).__name__}); backing off",
            ) from None
        missing = expected - alive
        missing -= RECENT.unlisted(missing)  # launched a moment ago: the listing lags
        if not missing:
            pool.last_activity = time.monotonic()
            return True
        ref.logger.info("instances missing in the cloud: %s", ", ".join(sorted(missing)))
        return False

    def _keeping_drift(self, pool: PoolState, ref: PoolRef, spec: SpotpoolSpec) -> list[int] | None:
        """Under driftPolicy Report, a replacement fills only the slots without an instance (a
        whole up would restore the drifted ones); None: the usual whole up."""
        if spec.drift_policy != DriftPolicy.REPORT or not pool.status.drift:
            return None
        if self._config(ref, spec) != pool.applied:
            return None  # the spec moved: the whole up applies it (and restores the drift)
        held = {i.slot for i in pool.status.instances}
        return [slot for slot in range(spec.desired_count()) if slot not in held] or None

    async def _correct_drift(self, pool: PoolState, ref: PoolRef, spec: SpotpoolSpec) -> None:
        """driftPolicy Correct: one up restores what the spec sets (a stopped instance is started
        again, the same instance with its disks: see docs/drift.md)."""
        config = self._config(ref, spec)
        await self._up(
            pool, ref, spec, config, "CorrectingDrift",
            "restoring instances changed outside the operator",
        )  # fmt: skip

    def _drift_found(
        self, pool: PoolState, ref: PoolRef, status: SpotpoolStatus, drift: list[InstanceDrift],
        policy: DriftPolicy,
    ) -> SpotpoolStatus:  # fmt: skip
        """The refresh's drift on the status, with a Warning Event the first time it is seen."""
        now = self.clock()
        if not drift:
            return drift_status.undrifted(
                status, "NoDrift",
                "the last full refresh found no instance changed outside the operator",
                ref.generation, now,
            )  # fmt: skip
        if not drift_status.is_known(pool.status, drift):
            message = drift_status.found_message(drift, policy)
            self.events.post(ref.event_ref(), "Warning", "DriftDetected", message[:1000])
            ref.logger.warning("drift: %s", describe_all(drift))
        return drift_status.drifted(status, drift, policy, ref.generation, now)

    async def _after_refresh(
        self,
        pool: PoolState,
        ref: PoolRef,
        result: OperationResult,
        before: dict[int | None, str],
        started: datetime,
        policy: DriftPolicy = DriftPolicy.CORRECT,
    ) -> None:
        self._post_recovered(ref, result)
        status = render.refreshed(pool.status, result, started, self.clock())
        status = self._drift_found(pool, ref, status, result.drift, policy)
        if result.gone_slots:
            self.note_reclaimed(pool, result.gone_slots)
            gone = ", ".join(
                f"slot {slot} ({before.get(slot, 'unknown instance')})"
                for slot in result.gone_slots
            )
            count = len(result.gone_slots)
            self.metrics.observe_reclaims(ref.namespace, ref.name, pool.status, result.gone_slots)
            self.events.post(
                ref.event_ref(),
                "Warning",
                "Reclaimed",
                f"the cloud reclaimed {count} instance(s): {gone}; replacing",
            )
            ref.logger.warning("reclaimed: %s", gone)
            await self.nodes_gone(ref, [before[s] for s in result.gone_slots if s in before])
            pool.replace_pending, pool.reclaimed_at = True, time.monotonic()
            await self._write(pool, ref, status)
        elif result.orphan_slots:  # a run died after creating them: the next up adopts them
            pool.replace_pending = True
            await self._write(pool, ref, status)
        elif visible(status) != visible(pool.status):
            await self._write(pool, ref, status)
        else:
            pool.status = status  # only lastOperation moved: not worth a write per interval
        pool.last_activity = time.monotonic()

    async def _replace(
        self, pool: PoolState, ref: PoolRef, spec: SpotpoolSpec, slots: list[int] | None = None,
        held: frozenset[int] = frozenset(),
    ) -> None:  # fmt: skip
        before = {i.slot: i.instance_id for i in pool.status.instances}
        config = self._config(ref, spec)
        result = await self._up(
            pool, ref, spec, config, "Replacing", "replacing reclaimed slots", slots, held
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
