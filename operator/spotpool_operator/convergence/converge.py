"""Create, update, resume: `up` the pool to its spec, coalescing requests that arrive while an
operation runs; a restart over a pool its stack already applied runs none."""

import time
from collections.abc import Callable

from spotpool.api.spec import DriftPolicy, SpotpoolSpec
from spotpool.api.stackconfig import StackConfig
from spotpool.api.status import SpotpoolStatus
from spotpool.engine.basics.results import OperationResult
from spotpool.engine.stacks.replan import Replan
from spotpool.engine.stacks.rollout import roll_out
from spotpool.engine.stacks.stack import PoolStack
from spotpool.engine.tencent.credentials import Credentials
from spotpool_operator.basics.failures import PoolProblem
from spotpool_operator.basics.pools import PoolRef, PoolState
from spotpool_operator.convergence.engine_runner import NO_CREDENTIALS, PoolEngine, PoolWork
from spotpool_operator.reporting import status as render


class Converging(PoolWork):
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
            config = self._config(ref, spec)
            if pool.applied is None and not pool.converged_once:
                await self._adopt_applied(pool, ref, spec, config)
            # Drift reported under Report, and the policy is Correct now: the up restores it.
            correct = bool(pool.status.drift) and spec.drift_policy == DriftPolicy.CORRECT
            if config == pool.applied and not pool.replace_pending and not correct:
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

    async def grow_held(self, ref: PoolRef) -> None:
        """A pool a limit holds, whose namespace's limits changed (an admin raised one): an up
        at once when it may grow now, else the Limited condition says what holds it now."""
        pool = self.pool(ref)
        if pool.lock.locked() or pool.applied is None:
            return  # busy (that run looks again), or no up yet (kopf's retries converge it)
        async with pool.lock:
            note = pool.limit_note
            spec = await self._spec(pool, ref, "up", quiet=True)
            await self._grow_if_allowed(pool, ref, spec, note)

    async def _adopt_applied(
        self, pool: PoolState, ref: PoolRef, spec: SpotpoolSpec, config: StackConfig
    ) -> None:
        """After a restart: when the stack's last up applied exactly this spec, take it as
        applied (no `up` to run) and start watching the pool's instances at once."""
        if pool.status.observed_generation is None:
            return  # no operator ever got this pool's spec applied: the up creates it
        if len(pool.status.instances) < pool.status.replicas:
            return  # short of instances (a run cut short): run the up, which refreshes first
        try:  # reading what was applied needs no cloud keys: the Secret may be gone
            credentials: Credentials | None = await self._resolve(ref, spec)
        except PoolProblem:
            credentials = None
        try:
            engine = self._engine(ref, credentials or NO_CREDENTIALS, spec.region)
            applied = await self._engine_call("resume", engine.applied_config, record=False)
        except Exception as error:  # the up that follows says what is wrong
            ref.logger.info("could not read the stack's last config: %s", type(error).__name__)
            return
        # Where its slots landed (stock placement, fallbacks) is not part of the spec.
        if applied is None or applied.intent() != config.redacted().intent():
            return
        ref.logger.info("the stack already applied this spec: no up on resume")
        pool.applied, pool.credentials, pool.converged_once = config, credentials, True
        pool.last_activity = time.monotonic()
        if credentials is None:
            return  # nothing to watch with; the timer's checks say what is missing
        self._watch(ref, pool, credentials, spec.region)

    def _up_call(
        self, engine: PoolEngine, pool: PoolState, ref: PoolRef, spec: SpotpoolSpec,
        config: StackConfig,
    ) -> Callable[..., OperationResult]:  # fmt: skip
        """A spec change of a pool already converged (beyond its count) is rolled out in batches
        of spec.disruption, the do-not-disrupt slots last (engine/stacks/rollout.py): it previews
        which slots the change replaces first; a change that replaces none is one plain up.

        Under a namespace limit every up of a converged pool is previewed so: a placement change
        (back to spot), a drift correction or a change started while the pool is short replaces
        instances create-before-delete too, and each such surge is reserved first."""
        applied, known = pool.applied, pool.status.observed_generation is not None
        if not isinstance(engine, PoolStack) or (applied is None and not known):
            return engine.up  # a new pool: nothing to replace
        unchanged = (
            applied is not None and config.model_copy(update={"count": applied.count}) == applied
        )
        stack, bounds = engine, spec.disruption
        status, credentials = pool.status, engine.credentials
        hooks = self.rollout_hooks(ref, spec.nodes)  # spec.nodes: emptiest first, drained first
        order, before = hooks if hooks else (None, None)
        # A drift correction may replace instances too: a node pool's is previewed and drained.
        drifted = bool(status.drift) and hooks is not None

        def rolling(
            placed: StackConfig, password: str | None, refresh: bool, replan: Replan | None
        ) -> OperationResult:
            limited = self._gate_now(ref, spec, status, credentials) is not None
            if not limited and (refresh or (unchanged and not drifted)):
                # Short of instances: the up looks at the cloud first, as ever.
                return stack.up(placed, password, refresh, replan)
            if refresh:  # limited and short: the cloud looked at first, then rolled out
                stack.refresh()
            room = self._surge_room(ref, spec, status, credentials, placed.count)
            rollout = roll_out(
                stack, placed, bounds.max_unavailable, bounds.max_surge, ref.do_not_disrupt,
                password, replan,
                on_batch=lambda n, batch, _r: ref.logger.info(
                    "rollout batch %d: slots %s replaced", n + 1, batch.slots
                ),
                surge_room=room, order=order, before_batch=before,
            )  # fmt: skip
            if rollout.batches:
                ref.logger.info(
                    "rolled out: slots %s replaced in %d batch(es) in %.1f s",
                    rollout.replaced, len(rollout.batches), rollout.seconds,
                )  # fmt: skip
            assert rollout.last is not None
            return rollout.last

        return rolling

    def _surge_room(
        self, ref: PoolRef, spec: SpotpoolSpec, status: SpotpoolStatus, credentials: Credentials,
        count: int,
    ) -> Callable[[int], int]:  # fmt: skip
        """How many surge instances a rollout's batches may make: reserved in the namespace's
        limits (in the engine's thread, once the preview says what is replaced, before any
        batch launches). The rollout waits when none may and maxUnavailable is 0, or when the
        instances it makes would cost more (or carry more GPUs) than the limits leave."""
        unavailable = spec.disruption.max_unavailable

        def room(wanted: int) -> int:
            gate = self._gate_now(ref, spec, status, credentials)
            if gate is None:
                return wanted
            fixed = count + len(status.surges)
            if over := gate.overdrawn(fixed):
                raise PoolProblem("NamespaceLimit", f"the rollout waits: {over}")
            if not wanted:
                return 0
            found = gate.hold(fixed + wanted, reserve=True)
            granted = max(0, min(wanted, found.count - fixed))
            if granted + unavailable == 0:
                raise PoolProblem(
                    "NamespaceLimit",
                    "the rollout waits: disruption.maxUnavailable is 0 and no surge instance "
                    f"fits ({found.message}); allow maxUnavailable, or free room",
                )
            if granted < wanted:
                ref.logger.info("rollout surge held at %d of %d: %s", granted, wanted,
                                found.message)  # fmt: skip
            return granted

        return room
