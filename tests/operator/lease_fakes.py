"""An in-memory CoordinationV1Api with the API server's compare-and-swap on resourceVersion,
and a clock the tests move by hand: the Lease timing logic without a cluster."""

import copy
import threading
import time
from typing import Any

import kubernetes

GATHER_TIMEOUT = 30.0  # seconds a gathering call waits for the others before it fails


class FakeClock:
    """A monotonic clock moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeLeases:
    """Leases by name in one namespace. `delay`: seconds each call takes (real time);
    `down`: every call fails as a stalled connection's would (a timeout). `gather(n)`: each
    call waits until n calls are in flight at once (a slow API server that answers only then),
    so calls made one after another never get past the first: `peak` counts the most in
    flight at once."""

    def __init__(self) -> None:
        self.items: dict[str, Any] = {}
        self.version = 0
        self.delay = 0.0
        self.down = False
        self.calls = 0
        self.in_flight = self.peak = 0
        self._gather = 0
        self._gathered = threading.Event()
        self._lock = threading.Lock()
        self._flight = threading.Condition()

    def gather(self, calls: int) -> None:
        self._gather = calls
        self._gathered.clear()

    def _call(self) -> None:
        with self._flight:
            self.calls += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            if self._gather and self.in_flight >= self._gather:
                self._gathered.set()
        try:
            # A deadlock breaker, not a time bound: one call at a time never gathers.
            if self._gather and not self._gathered.wait(GATHER_TIMEOUT):
                self._gathered.set()  # the calls after this one fail at once (peak stays low)
                self.down = True
                raise TimeoutError(f"{self._gather} calls never were in flight at once")
            if self.delay:
                time.sleep(self.delay)
            if self.down:
                raise TimeoutError("read timed out")
        finally:
            with self._flight:
                self.in_flight -= 1

    def _stored(self, lease: Any) -> Any:
        self.version += 1
        lease = copy.deepcopy(lease)
        lease.metadata.resource_version = str(self.version)
        self.items[lease.metadata.name] = lease
        return copy.deepcopy(lease)

    def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> Any:
        self._call()
        with self._lock:
            if name not in self.items:
                raise kubernetes.client.ApiException(status=404, reason="Not Found")
            return copy.deepcopy(self.items[name])

    def list_namespaced_lease(self, namespace: str, **_: Any) -> Any:
        self._call()
        with self._lock:
            return kubernetes.client.V1LeaseList(items=copy.deepcopy(list(self.items.values())))

    def create_namespaced_lease(self, namespace: str, body: Any, **_: Any) -> Any:
        self._call()
        with self._lock:
            if body.metadata.name in self.items:
                raise kubernetes.client.ApiException(status=409, reason="AlreadyExists")
            return self._stored(body)

    def replace_namespaced_lease(self, name: str, namespace: str, body: Any, **_: Any) -> Any:
        self._call()
        with self._lock:
            current = self.items.get(name)
            if current is None:
                raise kubernetes.client.ApiException(status=404, reason="Not Found")
            if body.metadata.resource_version != current.metadata.resource_version:
                raise kubernetes.client.ApiException(status=409, reason="Conflict")
            return self._stored(body)

    def delete_namespaced_lease(self, name: str, namespace: str, **_: Any) -> None:
        self._call()
        with self._lock:
            self.items.pop(name, None)


class Stalling:
    """One replica's view of the shared fake API server, which can be stalled alone."""

    def __init__(self, server: FakeLeases) -> None:
        self.server = server
        self.down = False

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.server, name)

        def proxied(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                raise TimeoutError("read timed out (stalled connection)")
            return call(*args, **kwargs)

        return proxied
