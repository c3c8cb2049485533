"""The namespace's limits around a pool's runs (basics/limits.py): the spec held at what the
limits allow (`_within_limits`, read only: the Limited condition says why), the instances
reserved before any launch (`_reserved`, in the run's own lock section; a run is cut to what
was granted), the reservation set to what the pool holds once a run is over (`_settle`).

Each instance the pool may launch is priced at the dearest quote of its spec's zones and types
(the price book, the on-demand price where it may run on demand) and counted in GPUs from the
cloud's instance-type data; a figure that cannot be known holds growth under the limit that
needs it."""

import asyncio
import logging
from dataclasses import replace
from functools import partial

from pydantic import ValidationError

from spotpool.api.access import Access, Hold
from spotpool.api.ledger import Ask, Unit, unit_of
from spotpool.api.spec import SpotpoolSpec
from spotpool.api.stackconfig import StackConfig
from spotpool.api.status import SpotpoolStatus
from spotpool.engine.tencent.credentials import Credentials
from spotpool_operator.basics import limits
from spotpool_operator.basics.credentials import access_of
from spotpool_operator.basics.failures import PoolProblem
from spotpool_operator.basics.pools import PoolRef, PoolState
from spotpool_operator.convergence.engine_calls import EngineCalls

log = logging.getLogger("spotpool_operator.limits")
NO_CREDENTIALS = "the pool's cloud credentials are not resolved, so its launch cannot be priced"


class LimitGates(EngineCalls):
    async def _resolve(self, ref: PoolRef, spec: SpotpoolSpec) -> Credentials:
        raise NotImplementedError  # pool_book.PoolBook: the pool's credentials

    def _gate(
        self, ref: PoolRef, spec: SpotpoolSpec, status: SpotpoolStatus,
        credentials: Credentials | None, access: Access,
    ) -> limits.Gate:  # fmt: skip
        """The pool under its namespace's limits (blocking: prices and GPU counts may be
        read)."""
        book, region = self.prices, spec.region
        if credentials is None or book is None:
            unit = Unit(None, None, NO_CREDENTIALS, NO_CREDENTIALS)
            count: limits.GpuCounter = lambda kinds: {}  # noqa: E731
        else:
            running = {(i.zone, i.instance_type) for i in status.instances if i.zone}
            pairs = {(z, t) for z in spec.zones() for t in spec.types()}
            pairs |= {(z, t) for z, t in running if t}
            quotes = book.quotes(credentials, region, pairs)
            count = partial(book.gpus, credentials, region)
            kinds = {*spec.types(), *(i.instance_type for i in status.instances)}
            unit = unit_of(spec, status.instances, quotes, count(k for k in kinds if k))
        # What it holds: its instances (their highest slot: a held count never drops a live
        # slot) and its surge instances.
        top = max((i.slot + 1 for i in status.instances if i.slot is not None), default=0)
        floor = max(len(status.instances), top) + len(status.surges)
        ask = Ask(ref.namespace, ref.uid, ref.name, floor, floor, unit)
        return limits.Gate(self.cluster, access, ask, count)

    def _access(self, namespace: str, fresh: bool = False) -> Access:
        """What the policies selecting the namespace say; `fresh`: read now (a reservation),
        else as cached for a few seconds (a look)."""
        if not fresh:
            return access_of(self.cluster, namespace)
        policies = self.cluster.fresh_access_policies()
        labels = self.cluster.namespace_labels(namespace) if policies else {}
        return Access.of(namespace, labels, policies)

    def _gate_now(
        self, ref: PoolRef, spec: SpotpoolSpec, status: SpotpoolStatus, credentials: Credentials
    ) -> limits.Gate | None:
        """`_gate` with the policies read now (blocking: in an engine thread, to reserve)."""
        access = self._access(ref.namespace, fresh=True)
        if not limits.limiting(access):
            return None
        return self._gate(ref, spec, status, credentials, access)

    async def _gate_for(
        self, pool: PoolState, ref: PoolRef, spec: SpotpoolSpec,
        credentials: Credentials | None = None, fresh: bool = False,
    ) -> limits.Gate | None:  # fmt: skip
        """The pool under its namespace's limits; None when no policy limits it."""
        access = await asyncio.to_thread(self._access, ref.namespace, fresh)
        if not limits.limiting(access):
            return None
        credentials = credentials or pool.credentials
        if credentials is None:
            try:
                credentials = await self._resolve(ref, spec)
            except Exception:  # refused or failing: said by the run; held here meanwhile
                credentials = None
        status = pool.status
        return await asyncio.to_thread(self._gate, ref, spec, status, credentials, access)

    async def _within_limits(
        self, pool: PoolState, ref: PoolRef, spec: SpotpoolSpec
    ) -> SpotpoolSpec:
        """The spec held at its namespace's limits, as the ledgers say now (nothing reserved:
        the run reserves); the Limited condition says why."""
        surges = len(pool.status.surges)
        try:
            gate = await self._gate_for(pool, ref, spec)
            if gate is not None:
                pool.limits_seen = limits.fingerprint(gate.access)
            want = spec.desired_count() + surges
            found = Hold(want, "") if gate is None else await asyncio.to_thread(gate.hold, want)
        except Exception as error:  # not known: no growth, nothing cut
            running = len(pool.status.instances)
            message = f"held at {running}: the namespace's limits could not be read ({error})"
            found = Hold(min(running, spec.desired_count()) + surges, message)
        count = max(found.count - surges, 0)
        pool.limit_note = found.message if count < spec.desired_count() else ""
        return limits.held_spec(spec, count)

    async def _reserved(
        self, pool: PoolState, ref: PoolRef, spec: SpotpoolSpec, config: StackConfig,
        credentials: Credentials, extra: int = 0,
    ) -> tuple[StackConfig, int]:  # fmt: skip
        """Reserve `config`'s slots, the pool's surges and `extra` more instances in every
        ledger limiting its namespace, before anything is launched: the config cut to the slots
        granted, and how many of `extra` were granted."""
        try:
            gate = await self._gate_for(pool, ref, spec, credentials, fresh=True)
            if gate is None:
                return config, extra
            surges = len(pool.status.surges)
            want = config.count + surges + extra
            found = await asyncio.to_thread(gate.hold, want, True)
        except Exception as error:
            raise PoolProblem(
                "LimitsNotReserved",
                f"the namespace's limits could not be reserved before the launch ({error}); "
                "nothing was launched: retrying",
            ) from None
        slots = min(config.count, max(found.count - surges, 0))
        granted = max(found.count - surges - slots, 0)
        if slots < config.count or granted < extra:
            pool.limit_note = found.message
        if slots < config.count:
            ref.logger.info("held at %d of %d slots: %s", slots, config.count, found.message)
            config = config.model_copy(update={"count": slots})
        return config, granted

    async def _settle(
        self, pool: PoolState, ref: PoolRef, spec: SpotpoolSpec, slots: int,
        credentials: Credentials | None = None,
    ) -> None:  # fmt: skip
        """After a run: the pool's reservation set to `slots` and its surges, never below what
        it runs (a failure leaves it higher, which holds others, never lets them pass)."""
        try:
            gate = await self._gate_for(pool, ref, spec, credentials)
            if gate is not None:
                await asyncio.to_thread(gate.settle, slots + len(pool.status.surges))
        except Exception as error:
            ref.logger.warning("the pool's reservation was not lowered: %s", error)

    async def _retain(
        self, pool: PoolState, ref: PoolRef, credentials: Credentials | None, kept: int
    ) -> None:
        """The pool is deleted with deletionPolicy Retain, keeping `kept` instances: they stay
        reserved (marked retained) until the cluster admin releases them. Raises when that
        cannot be written: the instances are not let go uncounted."""
        access = await asyncio.to_thread(self._access, ref.namespace, True)
        if not limits.limiting(access):
            return
        try:
            spec: SpotpoolSpec | None = SpotpoolSpec.model_validate(ref.spec)
        except ValidationError:
            spec = None
        if spec is not None:
            gate = await asyncio.to_thread(self._gate, ref, spec, pool.status, credentials, access)
        else:  # figures not known: the entry keeps the GPUs and cost it had
            ask = Ask(ref.namespace, ref.uid, ref.name, kept, kept, Unit(None, None))
            gate = limits.Gate(self.cluster, access, ask, lambda kinds: {})
        gate = replace(gate, ask=replace(gate.ask, floor=max(gate.ask.floor, kept)))
        try:
            await asyncio.to_thread(gate.retain)
        except Exception as error:
            raise PoolProblem(
                "LimitsNotReserved",
                f"the retained instances could not be recorded against the namespace's limits "
                f"({error}); retrying before the stack is forgotten",
            ) from None

    async def _release(self, ref: PoolRef) -> None:
        """The pool is destroyed: its reservations go (a failure leaves them, holding room
        until the cluster admin removes them: never room for an instance that runs)."""
        try:
            await asyncio.to_thread(limits.release, self.cluster, ref.uid)
        except Exception as error:
            ref.logger.warning("the pool's reservations were not released: %s", error)

    async def limits_moved(self, ref: PoolRef) -> bool:
        """The limits of the pool's namespace changed since its count was last held at them."""
        pool = self.pool_state(ref)
        access = await asyncio.to_thread(access_of, self.cluster, ref.namespace)
        return pool is not None and limits.fingerprint(access) != pool.limits_seen

    def pool_state(self, ref: PoolRef) -> PoolState | None:
        return self.pools.get(ref.uid)
