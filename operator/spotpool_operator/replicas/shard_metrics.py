"""The shards' metrics: how many, how many replicas, which this replica holds and serves."""

from prometheus_client import CollectorRegistry, Counter, Gauge


class ShardMetrics:
    def __init__(self, registry: CollectorRegistry, shards: int) -> None:
        self.shards = Gauge("spotpool_shards", "Shards the pools hash onto.", registry=registry)
        self.shards.set(shards)
        self.replicas = Gauge(
            "spotpool_shard_replicas",
            "Live replicas this replica counts (membership Leases).",
            registry=registry,
        )
        self.held = Gauge(
            "spotpool_shard_held",
            "1 while this replica holds the shard's Lease.",
            ["shard"],
            registry=registry,
        )
        self.pools = Gauge(
            "spotpool_shard_pools",
            "Pools of the shard this replica serves (0 while it does not hold the shard).",
            ["shard"],
            registry=registry,
        )
        self.transitions = Counter(
            "spotpool_shard_transitions",
            "Shards acquired, released (rebalancing, shutdown) and lost (not renewed in time).",
            ["shard", "event"],
            registry=registry,
        )
        for shard in range(shards):
            self.held.labels(str(shard)).set(0)
            self.pools.labels(str(shard)).set(0)
