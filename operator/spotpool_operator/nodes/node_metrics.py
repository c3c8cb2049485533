"""Per pool (namespace, pool; never a node or a pod): pods evicted by drains, how long drains
took, and the pool's nodes that are not Ready."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LABELS = ["namespace", "pool"]


class NodeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.evicted = Counter(
            "spotpool_node_pods_evicted_total",
            "Pods evicted from the pool's nodes (drains before a notice's reclaim or a "
            "voluntary termination, and the pods of a Node deleted after a reclaim).",
            LABELS,
            registry=registry,
        )
        self.drain_seconds = Histogram(
            "spotpool_node_drain_seconds",
            "Seconds a drain of one of the pool's nodes took (cordon to empty, or its deadline).",
            LABELS,
            buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
            registry=registry,
        )
        self.not_ready = Gauge(
            "spotpool_pool_nodes_not_ready",
            "The pool's instances whose Node is not registered or not Ready (spec.nodes).",
            LABELS,
            registry=registry,
        )
