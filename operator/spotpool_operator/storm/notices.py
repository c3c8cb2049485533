"""Termination notices: an instance's agent says the cloud takes it in two minutes, and the
pool's replacement for that slot starts at once — a surge instance beside the noticed one. When
the cloud takes the noticed instance, the fleet probe sees it go and the engine promotes the
surge instance into the slot (reclaims.py, engine `replace_slots`): no gap in capacity.

Who may say so: see spotpool.api.notices (one token per pool and slot) and docs/notices.md.
"""

import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from pydantic import ValidationError

from spotpool.api.notices import (
    NOTICE_LATE,
    CheckpointReport,
    NoticeReport,
    signature_problem,
    slot_token,
    time_problem,
)
from spotpool.api.spec import ChargeType, SpotpoolSpec
from spotpool.api.status import AcceptedNotice, Checkpoint, Instance, Surge
from spotpool_operator.basics.failures import PoolProblem, classify
from spotpool_operator.basics.pools import PoolRef, PoolState
from spotpool_operator.convergence.engine_runner import PoolWork
from spotpool_operator.reporting import status as render


class Notices(PoolWork):
    def receive_notice(
        self, body: bytes, signature: str, now: float | None = None
    ) -> tuple[int, str]:
        """An agent's report checked and taken in (see _check), and counted by its result."""
        result, code, message = self._check(body, signature, now)
        self.metrics.observe_notice(result)
        return code, message

    def _check(self, body: bytes, signature: str, now: float | None) -> tuple[str, int, str]:
        """Check an agent's report and take it in: its result (metrics.NOTICE_RESULTS), the HTTP
        status and a message for the agent.

        Accepted only when signed with the token of the slot and generation (nonce) it names,
        the instance and nonce it names are the ones the pool's status lists in that slot (an
        instance speaks for itself, and an earlier instance's token speaks for nobody), and its
        termination time lies within minutes of now (the cloud gives two).
        """
        try:
            report = NoticeReport.model_validate_json(body)
        except ValidationError as error:
            return (
                "malformed",
                400,
                f"not a notice report: {error.errors(include_url=False)[0]['msg']}",
            )
        key = self.settings.engine.notice_key(report.pool_uid)
        token = slot_token(key, report.slot, report.nonce)
        problem = signature_problem(token, signature, body, time.time() if now is None else now)
        if problem is not None:
            return "bad_signature", 401, problem
        if self.shards is not None and not self.shards.serves(report.pool_uid):
            return "not_served", 503, "this replica does not serve the pool's shard now; retry"
        pool = self.pools.get(report.pool_uid)
        if pool is None:
            return "unknown_pool", 404, "no pool with this uid is served here"
        received = self.clock() if now is None else datetime.fromtimestamp(int(now), UTC)
        if (problem := time_problem(report.termination_utc(), received)) is not None:
            return "bad_time", 422, problem
        if report.instance_id in {s.instance_id for s in pool.status.surges}:
            return (
                "from_surge",
                200,
                "a replacement itself: the slot's own instance is already being replaced",
            )
        listed = {i.slot: i for i in pool.status.instances}
        instance = listed.get(report.slot)
        if instance is None or instance.instance_id != report.instance_id:
            return (
                "wrong_instance",
                409,
                f"{report.instance_id} is not the instance of slot {report.slot}",
            )
        if report.nonce != (instance.nonce or ""):
            return (
                "stale_token",
                401,
                f"signed with the token of another generation of slot {report.slot} (an "
                "earlier instance's), not this instance's",
            )
        if report.slot in pool.noticed or any(s.slot == report.slot for s in pool.status.surges):
            return "repeat", 200, "already being replaced"
        if report.instance_id in pool.status.notices.unfulfilled:
            return (
                "unfulfilled",
                409,
                f"{report.instance_id} outlived its earlier notice's grace (NoticeUnfulfilled): "
                "no second replacement for the same instance",
            )
        pool.noticed[report.slot] = AcceptedNotice(
            slot=report.slot,
            instance_id=report.instance_id,
            termination_time=report.termination_utc(),
            received_time=received,
        )
        self._learn_notice(pool, instance)
        pool.wake.set()
        return "accepted", 202, "replacement starting"

    def _learn_notice(self, pool: PoolState, instance: Instance) -> None:
        """A notice is an interruption of its zone x type (its reclaim later counts no more)."""
        learner = self.capacity.learner if self.capacity is not None else None
        where = self.where(pool)
        spot = (instance.charge_type or ChargeType.SPOTPAID) == ChargeType.SPOTPAID
        if learner and where and spot and instance.zone and instance.instance_type:
            key = (*where, instance.zone, instance.instance_type)
            learner.interrupted(key, instance.instance_id)

    def receive_checkpoint(
        self, body: bytes, signature: str, now: float | None = None
    ) -> tuple[int, str]:
        """An agent's report of its onNotice command: checked like a notice (the slot's and
        generation's token; the instance the status lists in that slot, or the one a surge or
        an accepted notice of that slot replaces), then written to status.notices.checkpoints
        and posted as an Event by the pool's daemon (the pool's lock may be held by an up).

        200 `recorded` only once a status holding the result was written (or read from the
        cluster): until then 202, and the agent sends it again, so a result taken in by a
        replica whose shard then moves to another for good reaches the new holder."""
        try:
            report = CheckpointReport.model_validate_json(body)
        except ValidationError as error:
            return 400, f"not a checkpoint report: {error.errors(include_url=False)[0]['msg']}"
        key = self.settings.engine.notice_key(report.pool_uid)
        token = slot_token(key, report.slot, report.nonce)
        problem = signature_problem(token, signature, body, time.time() if now is None else now)
        if problem is not None:
            return 401, problem
        if self.shards is not None and not self.shards.serves(report.pool_uid):
            return 503, "this replica does not serve the pool's shard now; retry"
        pool = self.pools.get(report.pool_uid)
        if pool is None:
            return 404, "no pool with this uid is served here"
        listed = {i.slot: i for i in pool.status.instances}.get(report.slot)
        noticed = pool.noticed.get(report.slot)
        if not (
            (listed is not None and listed.instance_id == report.instance_id
             and (listed.nonce or "") == report.nonce)
            or any(s.slot == report.slot and s.replacing == report.instance_id
                   for s in pool.status.surges)
            or (noticed is not None and noticed.instance_id == report.instance_id)
        ):  # fmt: skip
            return 409, f"{report.instance_id} is not the noticed instance of slot {report.slot}"
        if report.instance_id in pool.written_checkpoints:
            return 200, "recorded"
        if report.instance_id in {
            c.instance_id for c in [*pool.status.notices.checkpoints, *pool.checkpoints]
        }:  # the agent sends it again until it reads `recorded` (200)
            return 202, "taken in, not yet in the pool's status: send it again"
        entry = Checkpoint(
            slot=report.slot,
            instance_id=report.instance_id,
            exit_code=report.exit_code,
            seconds=report.seconds,
            timed_out=report.timed_out,
            time=self.clock(),
        )
        pool.checkpoints.append(entry)
        pool.wake.set()
        return 202, "taken in, not yet in the pool's status: send it again"

    async def record_checkpoints(self, ref: PoolRef) -> None:
        """Write the onNotice results taken in to status.notices.checkpoints (the last 10) and
        post an Event for each: CheckpointSaved on exit 0, else CheckpointFailed."""
        pool = self.pool(ref)
        async with pool.lock:
            taken, pool.checkpoints = pool.checkpoints, []
            notices = pool.status.notices
            known = {c.instance_id for c in notices.checkpoints}  # kept across a shard's slip
            taken = [c for c in taken if c.instance_id not in known]
            checkpoints = [*notices.checkpoints, *taken][-10:]
            status = pool.status.model_copy(
                update={"notices": notices.model_copy(update={"checkpoints": checkpoints})}
            )
            await self._write(pool, ref, status)
        for entry in taken:
            what = (
                f"the onNotice command on {entry.instance_id} (slot {entry.slot}) exited "
                f"{entry.exit_code} after {entry.seconds:.1f} s"
                + (" (killed at its timeout)" if entry.timed_out else "")
            )
            if entry.exit_code == 0:
                self.events.post(ref.event_ref(), "Normal", "CheckpointSaved", what)
            else:
                self.events.post(ref.event_ref(), "Warning", "CheckpointFailed", what)
            ref.logger.info("%s", what)

    async def start_surges(self, ref: PoolRef) -> None:
        """Start the replacement of every noticed slot in one engine run. The notices stay in
        the status until it ran, so the replica serving the pool next starts them."""
        pool = self.pool(ref)
        async with pool.lock:
            noticed, pool.noticed = pool.noticed, {}
            try:
                await self._start_surges(pool, ref, noticed)
            except Exception:  # the shard slipped for a moment, a failed run: the daemon tries
                for slot, notice in noticed.items():  # again after its backoff, until too late
                    pool.noticed.setdefault(slot, notice)
                raise

    async def _start_surges(
        self, pool: PoolState, ref: PoolRef, noticed: dict[int, AcceptedNotice]
    ) -> None:
        """start_surges under the pool's lock, the notices taken out of the pool."""
        spec = await self._spec(pool, ref, "up", quiet=True)
        if spec.paused:
            return
        now = self.clock()
        listed = {i.slot: i.instance_id for i in pool.status.instances}
        surging = {s.slot for s in pool.status.surges}
        slots = sorted(
            slot
            for slot, notice in noticed.items()
            if listed.get(slot) == notice.instance_id
            and slot not in surging
            and slot not in pool.gone_slots  # gone already: the plain replacement is as quick
            and notice.instance_id not in pool.status.notices.unfulfilled
            and notice.termination_time + timedelta(seconds=NOTICE_LATE) >= now
        )
        if not slots:
            await self._settled(pool, ref)
            return
        slots = await self._surges_allowed(pool, ref, spec, slots)
        if not slots:
            await self._settled(pool, ref)
            return
        names = ", ".join(
            f"slot {s} ({n.instance_id} at {n.termination_time:%H:%M:%S} UTC)"
            for s, n in sorted(noticed.items())
            if s in slots
        )
        self.events.post(
            ref.event_ref(),
            "Warning",
            "TerminationNotice",
            f"the cloud will reclaim {names}; starting the replacement now",
        )
        ref.logger.warning("termination notice: %s", names)
        started = self.clock()
        taken = {s: noticed[s] for s in slots}
        # A notice whose surge run failed is still listed as accepted: its retry counts no more.
        counted = {(n.slot, n.instance_id) for n in pool.status.notices.accepted}
        new = [s for s in slots if (s, taken[s].instance_id) not in counted]
        status = render.noticed(self._with_identity(pool.status, ref, spec), len(new), started)
        await self._write(pool, ref, render.accepting(status, taken))
        credentials = await self._credentials(pool, ref, spec, "up")
        password = await self._login_password(pool, ref, spec)
        engine = self._engine(ref, credentials, spec.region)
        config = self._config(ref, spec)
        try:  # the pool's placed config: a surge run must not move any other slot
            placed, _ = await self._placed(pool, spec, config, credentials, None)
        except PoolProblem:  # no stock for missing slots: theirs is the next up's business
            placed = config
        try:
            result = await self._engine_call("up", engine.start_surge, placed, slots, password)
        except Exception as error:  # the reclaim itself is still replaced when it comes
            problem = classify(error)
            await self._fail(pool, ref, pool.status, "up", problem, started)
            raise problem from None
        made = [s for s in result.surges if s.slot in slots]
        if not made:  # nothing to surge after all (the engine ran no up)
            ref.logger.info("no surge started: slots %s have no instance in the state", slots)
            await self._settled(pool, ref)
            return
        status = render.surged(pool.status, result, taken, started, self.clock())
        await self._write(pool, ref, render.accepting(status, {}))
        await self._settle(pool, ref, spec, config.count, credentials)
        self.events.post(
            ref.event_ref(),
            "Normal",
            "Surging",
            "started "
            + ", ".join(f"{s.instance_id} for slot {s.slot}" for s in made)
            + f" in {result.seconds:.0f} s; each takes its slot when the cloud takes the "
            "old instance",
        )
        ref.logger.info("surge started in %.1f s: %s", result.seconds, made)
        if spec.nodes is not None and self.nodes is not None:  # the pods move to the surge
            for surge in made:
                notice = taken[surge.slot]
                self.nodes.drain_on_notice(ref, notice.instance_id, notice.termination_time,
                                           surge.instance_id, spec.nodes)  # fmt: skip

    async def _surges_allowed(
        self, pool: PoolState, ref: PoolRef, spec: SpotpoolSpec, slots: list[int]
    ) -> list[int]:
        """The noticed slots whose surge instance fits the namespace's limits, reserved before
        it is launched; the others are replaced when the cloud takes their instance (an Event
        says so)."""
        credentials = await self._credentials(pool, ref, spec, "up")
        config = self._config(ref, spec)
        _, granted = await self._reserved(pool, ref, spec, config, credentials, len(slots))
        held = slots[granted:]
        if held:
            message = (
                f"no replacement started ahead for slot(s) {', '.join(map(str, held))}: "
                f"{pool.limit_note or 'the namespace is at its limit'}; each is replaced when "
                "the cloud takes its instance"
            )
            self.events.post(ref.event_ref(), "Warning", "SurgeHeld", message[:1000])
            ref.logger.warning("%s", message)
        return slots[:granted]

    async def _settled(self, pool: PoolState, ref: PoolRef) -> None:
        """No notice is waiting any more: the status says so too."""
        if pool.status.notices.accepted:
            await self._write(pool, ref, render.accepting(pool.status, {}))

    async def retire_stale_surges(self, ref: PoolRef) -> None:
        """Delete the surge instances whose slot's instance still runs `notice_grace` seconds
        after their notice was received (the reclaim is not coming, or the report was not
        true), and every surge instance older than `surge_max_life` that has not taken its
        slot: the pool should not pay for two instances in one slot, whatever a report said."""
        pool = self.pool(ref)
        if not pool.status.surges or pool.lock.locked():
            return
        async with pool.lock:
            now = self.clock()
            if any(s.start_time is None for s in pool.status.surges):  # first seen now
                surges = [s.model_copy(update={"start_time": s.start_time or now})
                          for s in pool.status.surges]  # fmt: skip
                await self._write(pool, ref, pool.status.model_copy(update={"surges": surges}))
            listed = {i.slot: i.instance_id for i in pool.status.instances}
            stale = [s for s in pool.status.surges if self._stale(s, listed, now)]
            if not stale:
                return
            spec = await self._spec(pool, ref, "up", quiet=True)
            if spec.paused:
                return
            names = ", ".join(f"slot {s.slot} ({s.replacing or 'its instance'})" for s in stale)
            self.events.post(
                ref.event_ref(),
                "Warning",
                "NoticeUnfulfilled",
                f"{names} still running past its notice's grace, or the replacement past its "
                "longest life; deleting the replacement(s) "
                + ", ".join(s.instance_id for s in stale),
            )
            started = self.clock()
            credentials = await self._credentials(pool, ref, spec, "up")
            password = await self._login_password(pool, ref, spec)
            engine = self._engine(ref, credentials, spec.region)
            slots = [s.slot for s in stale]
            try:
                result = await self._engine_call(
                    "up", engine.retire_surges, self._config(ref, spec), slots, password
                )
            except Exception as error:
                problem = classify(error)
                await self._fail(pool, ref, pool.status, "up", problem, started)
                raise problem from None
            status = render.surged(pool.status, result, {}, started, now)
            await self._write(pool, ref, render.unfulfilled(status, stale))
            await self._settle(pool, ref, spec, self._config(ref, spec).count, credentials)

    def _stale(self, surge: Surge, listed: Mapping[int | None, str], now: datetime) -> bool:
        """Past its notice's grace (counted from the notice's receipt) while the slot's
        instance still runs, or past the longest life of a surge instance."""
        life = (now - surge.start_time).total_seconds() if surge.start_time else 0.0
        if life > self.settings.surge_max_life:
            return True
        since = surge.received_time or surge.termination_time  # older statuses: the latter
        return (
            since is not None
            and (now - since).total_seconds() > self.settings.notice_grace
            and listed.get(surge.slot) == surge.replacing
        )
