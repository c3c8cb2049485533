"""Termination notices: an instance's agent says the cloud takes it in two minutes, and the
pool's replacement for that slot starts at once — a surge instance beside the noticed one. When
the cloud takes the noticed instance, the fleet probe sees it go and the engine promotes the
surge instance into the slot (reclaims.py, engine `replace_slots`): no gap in capacity.

Who may say so: see spotpool.api.notices (one token per pool and slot) and docs/notices.md.
"""

import time

from pydantic import ValidationError

from spotpool.api.notices import NoticeReport, signature_problem, slot_token
from spotpool_operator import status as render
from spotpool_operator.engine_runner import PoolWork
from spotpool_operator.failures import classify
from spotpool_operator.pools import PoolRef


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

        Accepted only when signed with the token of the slot it names, and the instance it
        names is the one the pool's status lists in that slot: an instance speaks for itself.
        """
        try:
            report = NoticeReport.model_validate_json(body)
        except ValidationError as error:
            return (
                "malformed",
                400,
                f"not a notice report: {error.errors(include_url=False)[0]['msg']}",
            )
        token = slot_token(self.settings.engine.notice_key(report.pool_uid), report.slot)
        problem = signature_problem(token, signature, body, time.time() if now is None else now)
        if problem is not None:
            return "bad_signature", 401, problem
        if self.shards is not None and not self.shards.serves(report.pool_uid):
            return "not_served", 503, "this replica does not serve the pool's shard now; retry"
        pool = self.pools.get(report.pool_uid)
        if pool is None:
            return "unknown_pool", 404, "no pool with this uid is served here"
        if report.instance_id in {s.instance_id for s in pool.status.surges}:
            return (
                "from_surge",
                200,
                "a replacement itself: the slot's own instance is already being replaced",
            )
        listed = {i.slot: i.instance_id for i in pool.status.instances}
        if listed.get(report.slot) != report.instance_id:
            return (
                "wrong_instance",
                409,
                f"{report.instance_id} is not the instance of slot {report.slot}",
            )
        if report.slot in pool.noticed or any(s.slot == report.slot for s in pool.status.surges):
            return "repeat", 200, "already being replaced"
        pool.noticed[report.slot] = (report.instance_id, report.termination_utc())
        pool.wake.set()
        return "accepted", 202, "replacement starting"

    async def start_surges(self, ref: PoolRef) -> None:
        """Start the replacement of every noticed slot in one engine run."""
        pool = self.pool(ref)
        async with pool.lock:
            noticed, pool.noticed = pool.noticed, {}
            spec = await self._spec(pool, ref, "up", quiet=True)
            if spec.paused:
                return
            listed = {i.slot: i.instance_id for i in pool.status.instances}
            surging = {s.slot for s in pool.status.surges}
            slots = sorted(
                slot
                for slot, (instance_id, _) in noticed.items()
                if listed.get(slot) == instance_id
                and slot not in surging
                and slot not in pool.gone_slots  # gone already: the plain replacement is as quick
            )
            if not slots:
                return
            names = ", ".join(
                f"slot {s} ({noticed[s][0]} at {noticed[s][1]:%H:%M:%S} UTC)" for s in slots
            )
            self.events.post(
                ref.event_ref(),
                "Warning",
                "TerminationNotice",
                f"the cloud will reclaim {names}; starting the replacement now",
            )
            ref.logger.warning("termination notice: %s", names)
            started = self.clock()
            status = render.noticed(
                self._with_identity(pool.status, ref, spec), len(slots), started
            )
            pool.status = status
            credentials = await self._credentials(pool, ref, spec, "up")
            password = await self._login_password(pool, ref, spec)
            engine = self._engine(ref, credentials, spec.region)
            config = self._config(ref, spec)
            try:
                result = await self._engine_call("up", engine.start_surge, config, slots, password)
            except Exception as error:  # the reclaim itself is still replaced when it comes
                problem = classify(error)
                await self._fail(pool, ref, pool.status, "up", problem, started)
                raise problem from None
            status = render.surged(pool.status, result, noticed, started, self.clock())
            await self._write(pool, ref, status)
            made = [s for s in status.surges if s.slot in slots]
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

    async def retire_stale_surges(self, ref: PoolRef) -> None:
        """Delete the surge instances whose slot's instance still runs `notice_grace` seconds
        past the time its notice gave: the reclaim is not coming (or the report was not true),
        and the pool should not pay for two instances in one slot."""
        pool = self.pool(ref)
        if not pool.status.surges or pool.lock.locked():
            return
        async with pool.lock:
            now = self.clock()
            listed = {i.slot: i.instance_id for i in pool.status.instances}
            stale = [
                s
                for s in pool.status.surges
                if s.termination_time is not None
                and (now - s.termination_time).total_seconds() > self.settings.notice_grace
                and listed.get(s.slot) == s.replacing
            ]
            if not stale:
                return
            spec = await self._spec(pool, ref, "up", quiet=True)
            if spec.paused:
                return
            names = ", ".join(f"slot {s.slot} ({s.replacing})" for s in stale)
            self.events.post(
                ref.event_ref(),
                "Warning",
                "NoticeUnfulfilled",
                f"{names} still running past the termination time its notice gave; deleting "
                "the replacement(s) " + ", ".join(s.instance_id for s in stale),
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
            await self._write(pool, ref, render.surged(pool.status, result, {}, started, now))
