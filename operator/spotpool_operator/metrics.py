"""Prometheus metrics of the operator, served as text on a port of their own."""

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from spotpool.api.status import SpotpoolStatus


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.operations = Counter(
            "spotpool_operations",
            "Engine operations run, by kind (up, refresh, destroy, forget) and result.",
            ["kind", "result"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "spotpool_operation_duration_seconds",
            "How long engine operations take, by kind.",
            ["kind"],
            buckets=(1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800),
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "spotpool_operations_in_flight",
            "Engine operations running now.",
            registry=self.registry,
        )
        self.desired = Gauge(
            "spotpool_pool_desired_instances",
            "Instances each pool should have.",
            ["namespace", "pool"],
            registry=self.registry,
        )
        self.instances = Gauge(
            "spotpool_pool_instances",
            "Instances each pool has.",
            ["namespace", "pool"],
            registry=self.registry,
        )
        self.ready = Gauge(
            "spotpool_pool_ready_instances",
            "RUNNING instances of each pool.",
            ["namespace", "pool"],
            registry=self.registry,
        )
        self.reclaims = Counter(
            "spotpool_reclaims",
            "Spot instances the cloud reclaimed, by pool.",
            ["namespace", "pool"],
            registry=self.registry,
        )
        self.reclaim_to_replaced = Histogram(
            "spotpool_reclaim_replaced_seconds",
            "From a reclaim's detection to its replacement in the status.",
            buckets=(5, 10, 15, 20, 30, 60, 120, 300),
            registry=self.registry,
        )

    def observe_operation(self, kind: str, succeeded: bool, seconds: float) -> None:
        self.operations.labels(kind, "succeeded" if succeeded else "failed").inc()
        self.duration.labels(kind).observe(seconds)

    def observe_pool(self, namespace: str, name: str, status: SpotpoolStatus) -> None:
        self.desired.labels(namespace, name).set(status.replicas)
        self.instances.labels(namespace, name).set(status.size)
        self.ready.labels(namespace, name).set(status.ready_replicas)

    def forget_pool(self, namespace: str, name: str) -> None:
        for metric in (self.desired, self.instances, self.ready, self.reclaims):
            with contextlib.suppress(KeyError):
                metric.remove(namespace, name)

    def serve(self, host: str, port: int) -> None:
        """Serve /metrics in a daemon thread (it ends with the process)."""
        start_http_server(port, addr=host, registry=self.registry)
