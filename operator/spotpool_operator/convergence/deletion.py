"""Deletion (the finalizer): destroy the stack, or forget it and keep the instances — and
always end or say why, even when the pool's Secret is gone."""

import asyncio
from datetime import datetime

from pydantic import ValidationError

from spotpool.api.spec import DeletionPolicy, SpotpoolSpec
from spotpool.api.status import SpotpoolStatus
from spotpool.engine.basics.errors import InstancesRemain, StackHeldByAnotherCluster
from spotpool.engine.leftovers.accounts import account_of
from spotpool.engine.tencent.credentials import Credentials
from spotpool_operator.basics.failures import PoolProblem, classify
from spotpool_operator.basics.pools import PoolRef, PoolState
from spotpool_operator.convergence.engine_runner import NO_CREDENTIALS, PoolWork
from spotpool_operator.convergence.node_hooks import nodes_of
from spotpool_operator.reporting import status as render

WAITING = "WaitingForInstances"


def _listed(held: dict[str, str]) -> str:
    """`i-1 (slot-0), i-2 (surge-0)`: which instance is which, surges named as such."""
    return ", ".join(f"{instance} ({name})" for name, instance in sorted(held.items()))


def _says(status: SpotpoolStatus, reason: str) -> bool:
    """Whether the pool's Progressing condition already gives this reason."""
    return any(c.type == "Progressing" and c.reason == reason for c in status.conditions)


class Deletion(PoolWork):
    # --- delete -------------------------------------------------------------------------------

    async def delete(self, ref: PoolRef) -> None:
        """The finalizer: destroy the stack (Delete) or forget it and keep the instances."""
        pool = self.pool(ref)
        async with pool.lock:
            retain = ref.spec.get("deletionPolicy") == DeletionPolicy.RETAIN.value
            if ref.spec.get("paused"):
                if not _says(pool.status, "DeletionPaused"):  # once, not at every retry
                    status = render.paused(pool.status, ref.generation, self.clock(), True)
                    await self._write(pool, ref, status)
                    self.events.post(
                        ref.event_ref(), "Warning", "DeletionPaused", render.PAUSED_DELETION
                    )
                raise PoolProblem("DeletionPaused", render.PAUSED_DELETION)
            started = self.clock()
            verb = "forgetting the stack, keeping the instances" if retain else "destroying"
            status = render.progressing(pool.status, "Deleting", verb, ref.generation, started)
            await self._write(pool, ref, status)
            region = str(ref.spec.get("region") or "")
            credentials, problem = await self._deletion_credentials(pool, ref)
            engine = self._engine(ref, credentials, region)
            if problem is None and self.strays is not None:  # a late instance is swept with it
                record = account_of(ref.namespace, ref.spec, region)
                self.strays.remember(credentials, region, record, ref.identity)
            if await self._held_elsewhere(ref, engine):
                return
            try:
                if retain:
                    # Surges too: Retain forgets nothing it owns.
                    kept = await self._engine_call("forget", engine.held_instance_ids, record=False)
                    # Counted against the namespace's limits until the admin releases them.
                    await self._retain(pool, ref, None if problem else credentials, len(kept))
                    await self._engine_call("forget", engine.forget)
                    message = f"stack forgotten; {len(kept)} instance(s) kept" + (
                        f": {_listed(kept)}" if kept else ""
                    )
                    self.events.post(ref.event_ref(), "Normal", "Retained", message)
                else:
                    owned = await self._engine_call(
                        "destroy", engine.held_instance_ids, record=False
                    )
                    if problem is not None and owned:
                        # Instances to delete, and no key pair to do it with: wait, and say
                        # how to end it either way.
                        raise PoolProblem(
                            problem.reason,
                            f"{problem.message}. The stack still holds {len(owned)} instance(s) "
                            f"({_listed(owned)}) and deleting them needs the key pair: "
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
                        await self._release(ref)
                        self.forget(ref)
                        return
                    await self.drain_going(ref, nodes_of(dict(ref.spec)), None, "pool deletion")
                    try:
                        result = await self._engine_call("destroy", engine.destroy)
                    except InstancesRemain as remain:
                        await self._wait_for_instances(pool, ref, remain, started)
                        raise PoolProblem(WAITING, str(remain)) from None
                    self.events.post(
                        ref.event_ref(),
                        "Normal",
                        "Destroyed",
                        f"deleted {result.changes.delete} resource(s) and the stack",
                    )
                    await self._release(ref)
            except Exception as error:
                if isinstance(error, PoolProblem) and error.reason == WAITING:
                    raise  # said as progress, not as a failure: the finalizer waits
                found = classify(error)
                await self._fail(pool, ref, pool.status, "destroy", found, started)
                raise found from None
        self.forget(ref)

    async def _held_elsewhere(self, ref: PoolRef, engine: object) -> bool:
        """The stack is another live cluster's (a backend shared by mistake): deleting this
        pool leaves it and its instances to that cluster, and says so. True: deleted."""
        guard = self.settings.engine.guard
        if guard is None:
            return False
        try:
            await asyncio.to_thread(guard.check, engine)
        except StackHeldByAnotherCluster as held:
            self.events.post(
                ref.event_ref(), "Warning", "StackHeldByAnotherCluster",
                f"pool deleted; its stack and every instance it holds stay cluster "
                f"{held.holder}'s, untouched: {held}"[:1000],
            )  # fmt: skip
            await self._release(ref)
            self.forget(ref)
            return True
        except Exception:  # a rival's claim, an unreadable backend: the destroy says so
            return False
        return False

    async def _wait_for_instances(
        self, pool: PoolState, ref: PoolRef, remain: InstancesRemain, started: datetime
    ) -> None:
        """Instances of the pool are still in the cloud and not yet ours to terminate: say so
        (the finalizer stays; kopf comes back with a growing delay and the sweep runs again)."""
        ids = ", ".join(sorted(remain.remaining))
        message = (
            f"waiting for {len(remain.remaining)} instance(s) tagged for the pool ({ids}) to be "
            "old enough to terminate or gone: a young one may be a create still in flight"
        )
        status = render.progressing(pool.status, "Deleting", message, ref.generation, started)
        await self._write(pool, ref, status)
        self.events.post(ref.event_ref(), "Normal", WAITING, message)

    async def _deletion_credentials(
        self, pool: PoolState, ref: PoolRef
    ) -> tuple[Credentials, PoolProblem | None]:
        """The key pair to delete with: the resource's, else the last that worked here.

        With neither, the problem comes back too: deleting can go on only if the stack holds
        no instance (the Secret may be gone first when a whole namespace is deleted).
        """
        try:
            spec = SpotpoolSpec.model_validate(ref.spec)
            credentials = await self._resolve(ref, spec)
            return credentials, None
        except (PoolProblem, ValidationError) as error:
            if pool.credentials is not None:
                return pool.credentials, None
            return NO_CREDENTIALS, classify(error)
