"""The operator's Kubernetes Lease (coordination.k8s.io/v1): who may write the stacks.

One Lease names the writer. A replica acquires it when it is free (never held, released, or
not renewed within its duration), renews it every third of the duration, and releases it on
shutdown. The Lease also records the hostnames of every holder so far (an annotation), so a
later holder can prove a stack lock's owner gone: a lock taken by an earlier holder before
this one acquired the Lease belongs to a process that lost or gave up the right to write
(engine/ownership.py). While this process does not hold the Lease it runs no operation; the
moment it stops holding it, `on_lost` is called to cancel what is running.
"""

import asyncio
import concurrent.futures
import json
import logging
import socket
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import kubernetes

log = logging.getLogger("spotpool_operator.lease")
HOLDERS = "spotpool.devops.jokerbai.com/holders"  # JSON list of hostnames, oldest first
KEEP_HOLDERS = 32
# Renewals get a thread of their own: in asyncio's shared pool they would queue behind the
# pools' work (a thousand pools' Secret reads and checkpoint reads at a restart) and the
# Lease would slip away from a busy but healthy operator.
LEASE_THREAD = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="lease")


def _now() -> datetime:
    return datetime.now(UTC)


class OperatorLease:
    """Holds one Lease; implements the engine's LeaseView."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        name: str,
        duration: float = 30.0,
        hostname: str | None = None,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.api = api  # a kubernetes.client.CoordinationV1Api
        self.namespace, self.name = namespace, name
        self.duration = duration
        self.hostname = hostname or socket.gethostname()
        self.identity = f"{self.hostname}_{uuid.uuid4().hex[:8]}"
        self.clock = clock
        self._acquired: datetime | None = None
        self._renewed: datetime | None = None
        self._earlier: frozenset[str] = frozenset()
        self.held_event = asyncio.Event()
        self.on_lost: list[Callable[[], None]] = []

    # --- LeaseView ---------------------------------------------------------------------------

    def held(self) -> bool:
        """Held, and renewed recently enough that no one else can have taken it over."""
        renewed = self._renewed
        margin = timedelta(seconds=self.duration * 2 / 3)
        return renewed is not None and self.clock() < renewed + margin

    def acquired_at(self) -> datetime:
        return self._acquired or datetime.max.replace(tzinfo=UTC)

    def earlier_holders(self) -> frozenset[str]:
        return self._earlier

    # --- acquiring and renewing --------------------------------------------------------------

    def step(self, current: Any = None) -> bool:
        """One try to acquire or renew; True when this process holds the Lease after it.
        `current`: the Lease as just read (a listing of all shards' Leases): no second read."""
        now = self.clock()
        lease = current
        if lease is None:
            try:
                lease = self.api.read_namespaced_lease(
                    self.name, self.namespace, _request_timeout=10
                )
            except kubernetes.client.ApiException as error:
                if error.status != 404:
                    raise
                return self._create(now)
        spec = lease.spec
        holder = spec.holder_identity or ""
        if holder == self.identity:
            spec.renew_time = now
            self.api.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=10)
            self._renewed = now
            return True
        renewed = spec.renew_time or spec.acquire_time
        expired = renewed is None or now > renewed + timedelta(
            seconds=spec.lease_duration_seconds or self.duration
        )
        if holder and not expired:
            return False
        holders = _holders(lease.metadata.annotations)
        spec.holder_identity = self.identity
        spec.acquire_time = spec.renew_time = now
        spec.lease_duration_seconds = int(self.duration)
        spec.lease_transitions = (spec.lease_transitions or 0) + 1
        lease.metadata.annotations = {
            **(lease.metadata.annotations or {}),
            HOLDERS: json.dumps([*holders, self.hostname][-KEEP_HOLDERS:]),
        }
        # resourceVersion makes this a compare-and-swap: of two replicas, one wins.
        self.api.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=10)
        self._took(now, holders, previous=holder)
        return True

    def _create(self, now: datetime) -> bool:
        body = kubernetes.client.V1Lease(
            metadata=kubernetes.client.V1ObjectMeta(
                name=self.name,
                namespace=self.namespace,
                annotations={HOLDERS: json.dumps([self.hostname])},
            ),
            spec=kubernetes.client.V1LeaseSpec(
                holder_identity=self.identity,
                acquire_time=now,
                renew_time=now,
                lease_duration_seconds=int(self.duration),
                lease_transitions=0,
            ),
        )
        self.api.create_namespaced_lease(self.namespace, body, _request_timeout=10)
        self._took(now, [], previous="")
        return True

    def _took(self, now: datetime, holders: list[str], previous: str) -> None:
        self._acquired = self._renewed = now
        self._earlier = frozenset(holders)
        log.info(
            "acquired Lease %s/%s as %s%s", self.namespace, self.name, self.identity,
            f" (after {previous})" if previous else "",
        )  # fmt: skip

    def release(self) -> None:
        """Give the Lease up at shutdown, so the next holder need not wait for it to expire."""
        if self._renewed is None:
            return
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=5)
            if lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = ""
                self.api.replace_namespaced_lease(
                    self.name, self.namespace, lease, _request_timeout=5
                )
                log.info("released Lease %s/%s", self.namespace, self.name)
        except Exception as error:  # it expires by itself
            log.warning("could not release the Lease: %s", error)
        self._renewed = None

    async def run(self) -> None:
        """Acquire and keep renewing until cancelled; tell `on_lost` when it slips away."""
        while True:
            try:
                holding = await asyncio.get_running_loop().run_in_executor(LEASE_THREAD, self.step)
            except Exception as error:  # a conflict or a blip: `held()` runs out on its own
                log.warning("Lease %s/%s: %s", self.namespace, self.name, _short(error))
                holding = self.held()
            if holding:
                self.held_event.set()
            elif self.held_event.is_set():
                self.held_event.clear()
                self._renewed = None
                log.warning("lost Lease %s/%s: stopping every operation", self.namespace, self.name)
                for callback in self.on_lost:
                    callback()
            await asyncio.sleep(self.duration / 3 if holding else self.duration / 6)


def _holders(annotations: dict[str, str] | None) -> list[str]:
    try:
        value = json.loads((annotations or {}).get(HOLDERS, "[]"))
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


def _short(error: Exception) -> str:
    status = getattr(error, "status", None)
    return f"HTTP {status} {getattr(error, 'reason', '')}" if status else str(error)[:200]
