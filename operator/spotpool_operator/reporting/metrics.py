"""Prometheus metrics of the operator, served as text on a port of their own.

Names follow the Prometheus conventions (`_total` counters, `_seconds`, base units); labels name
a pool (namespace, pool) at most, never an instance, so the series count grows with pools, not
with reclaims. Every metric here is queried by the Grafana dashboard
(operator/deploy/helm/spotpool/dashboards/spotpool.json; tests/deploy/test_dashboard.py checks
both agree).
"""

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from spotpool.api.status import Phase, SpotpoolStatus
from spotpool.engine.tencent.ratelimit import Buckets
from spotpool.version import package_version, python_version, revision

UNKNOWN = "unknown"  # the label value of a zone or instance type the status did not record
# What became of the termination-notice reports agents sent (notices.py answers each).
NOTICE_RESULTS = (
    "accepted",  # the slot's replacement starts
    "repeat",  # its slot is already being replaced
    "from_surge",  # a surge instance's own notice: acknowledged, nothing to do
    "malformed",  # refused: not a report (400), or too large (413)
    "bad_signature",  # refused: not signed by the slot's token, or outside the clock window
    "not_served",  # refused: another replica serves the pool's shard now (503, retried)
    "unknown_pool",  # refused: no such pool served here (404)
    "wrong_instance",  # refused: not the instance the status lists in that slot (409)
    "stale_token",  # refused: signed with an earlier instance's token of that slot (401)
    "unfulfilled",  # refused: this instance's earlier notice went unfulfilled (409)
    "bad_time",  # refused: a termination time not within minutes of receipt (422)
    "rate_limited",  # refused: too many reports or connections from there now (429)
)
SURGE_EVENTS = ("started", "promoted", "retired")


class _CapacityGap(Collector):
    """Per pool: seconds it had fewer ready instances than desired, counted up to the scrape."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._short_since: dict[tuple[str, str], float | None] = {}
        self._seconds: dict[tuple[str, str], float] = {}

    def observe(self, key: tuple[str, str], short: bool) -> None:
        with self._lock:
            since = self._short_since.get(key)
            now = self._clock()
            if since is not None and not short:
                self._seconds[key] = self._seconds.get(key, 0.0) + now - since
            self._seconds.setdefault(key, 0.0)
            self._short_since[key] = (since if since is not None else now) if short else None

    def forget(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._short_since.pop(key, None)
            self._seconds.pop(key, None)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "spotpool_pool_short_seconds",
            "Seconds each pool had fewer ready instances than desired (its capacity gap).",
            labels=["namespace", "pool"],
        )
        with self._lock:
            now = self._clock()
            for key, seconds in self._seconds.items():
                since = self._short_since.get(key)
                family.add_metric(list(key), seconds + (now - since if since is not None else 0))
        yield family


class _TokenBuckets(Collector):
    """The token buckets of cloud API calls (engine/tencent/ratelimit.py), per account, region and
    action. An assumed role's bucket is its account's (a uin, not a secret: the `account` label);
    a key pair is never a label (its SecretId is a credential): the key pairs' buckets are shown
    under `account=""`, the emptiest bucket and the summed waits of them all."""

    def __init__(self, buckets: Buckets) -> None:
        self._buckets = buckets

    def collect(self) -> Iterator[Metric]:
        fill = GaugeMetricFamily(
            "spotpool_cloud_api_bucket_fill_ratio",
            "Share of the token bucket's burst available now (0: calls wait), by account (an "
            "assumed role's; empty: the lowest over key pairs), region and action.",
            labels=["account", "region", "action"],
        )
        waited = CounterMetricFamily(
            "spotpool_cloud_api_bucket_wait_seconds",
            "Seconds calls waited for a token of their bucket (Spotpool's own throttling), by "
            "account (an assumed role's; empty: key pairs), region and action.",
            labels=["account", "region", "action"],
        )
        lowest: dict[tuple[str, str, str], float] = {}
        waits: dict[tuple[str, str, str], float] = {}
        for (owner, region, action), bucket in self._buckets.all().items():
            key = (owner if owner.isdigit() else "", region, action)  # a uin; never a SecretId
            lowest[key] = min(lowest.get(key, 1.0), bucket.fill())
            waits[key] = waits.get(key, 0.0) + bucket.waited
        for key in sorted(lowest):
            fill.add_metric(list(key), lowest[key])
            waited.add_metric(list(key), waits[key])
        yield fill
        yield waited


class Metrics:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = CollectorRegistry()
        # The usual *_build_info: join on it to see which build a replica runs.
        Gauge(
            "spotpool_build_info",
            "The running build: always 1, labelled with its version, git revision and Python.",
            ["version", "revision", "python"],
            registry=self.registry,
        ).labels(package_version(), revision() or UNKNOWN, python_version()).set(1)
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
            buckets=(0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800),
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "spotpool_operations_in_flight",
            "Engine operations running now.",
            registry=self.registry,
        )
        self.queued = Gauge(
            "spotpool_operations_queued",
            "Engine operations waiting for a free slot (--max-concurrent are in flight).",
            registry=self.registry,
        )
        self.failures = Counter(
            "spotpool_failures",
            "Failed operations of pools, by kind and the reason their condition gives.",
            ["kind", "reason"],
            registry=self.registry,
        )
        self.pools = Gauge(
            "spotpool_pools",
            "Pools this operator serves, by phase.",
            ["phase"],
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
        self.missing = Gauge(
            "spotpool_pool_missing_instances",
            "Desired instances each pool lacks now (desired minus ready, at least 0).",
            ["namespace", "pool"],
            registry=self.registry,
        )
        self.hourly_cost = Gauge(
            "spotpool_pool_hourly_cost",
            "What each pool's instances cost an hour now (status.hourlyCost: the sum of their "
            "spot or on-demand prices, in the cloud's currency); absent while a price is unknown.",
            ["namespace", "pool"],
            registry=self.registry,
        )
        self.hourly_savings = Gauge(
            "spotpool_pool_hourly_savings",
            "What each pool saves an hour against the same instances on demand "
            "(status.onDemandHourlyCost minus status.hourlyCost).",
            ["namespace", "pool"],
            registry=self.registry,
        )
        self.reclaims = Counter(
            "spotpool_reclaims",
            "Spot instances the cloud reclaimed, by pool, zone and instance type.",
            ["namespace", "pool", "zone", "instance_type"],
            registry=self.registry,
        )
        self.reclaim_to_replaced = Histogram(
            "spotpool_reclaim_replaced_seconds",
            "From a reclaim's detection to its replacement in the status.",
            buckets=(0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300, 600),
            registry=self.registry,
        )
        self.cloud_calls = Counter(
            "spotpool_cloud_api_calls",
            "Tencent Cloud API calls the operator made itself (fleet probe, checks, orphan "
            "clean-up; not the provider's inside Pulumi runs), by action and result (ok, "
            "throttled, error).",
            ["action", "result"],
            registry=self.registry,
        )
        self.notice_reports = Counter(
            "spotpool_notice_reports",
            "Termination-notice reports received from the instances' agents, by result "
            "(accepted, repeat, from_surge, or why refused).",
            ["result"],
            registry=self.registry,
        )
        self.surges = Counter(
            "spotpool_surges",
            "Surge instances (a noticed slot's early replacement), by event: started, "
            "promoted (took the slot when the cloud took the noticed instance), retired "
            "(deleted: the reclaim did not come, or the slot went away).",
            ["event"],
            registry=self.registry,
        )
        self.orphans_swept = Counter(
            "spotpool_orphans_swept",
            "Instances of this install and cluster whose pool no longer exists, held by no "
            "stack, terminated by the sweep once the pool was missing for the orphan grace "
            "(strays.py).",
            registry=self.registry,
        )
        self.orphans_reported = Counter(
            "spotpool_orphans_reported",
            "Instances of this install whose pool no longer exists that the sweep would "
            "terminate, reported instead (--sweep report): each counted once (strays.py).",
            registry=self.registry,
        )
        self.stacks_orphaned = Gauge(
            "spotpool_stacks_orphaned",
            "Stacks of the backend whose pool no longer exists, holding a deleted pool's "
            "instances of this install (never swept): as of the sweep's last read "
            "(cloud/orphaned_stacks.py; `spotpool stacks orphaned` lists them).",
            registry=self.registry,
        )
        for result in NOTICE_RESULTS:  # every series exists from the start, at 0
            self.notice_reports.labels(result)
        for event in SURGE_EVENTS:
            self.surges.labels(event)
        self._gap = _CapacityGap(clock)
        self.registry.register(self._gap)
        self._phases: dict[tuple[str, str], str] = {}
        self._reclaim_labels: dict[tuple[str, str], set[tuple[str, str]]] = {}
        for phase in Phase:
            self.pools.labels(phase.value).set(0)

    def observe_operation(self, kind: str, succeeded: bool, seconds: float) -> None:
        self.operations.labels(kind, "succeeded" if succeeded else "failed").inc()
        self.duration.labels(kind).observe(seconds)

    def observe_failure(self, kind: str, reason: str) -> None:
        self.failures.labels(kind, reason).inc()

    def observe_pool(self, namespace: str, name: str, status: SpotpoolStatus) -> None:
        self.desired.labels(namespace, name).set(status.replicas)
        self.instances.labels(namespace, name).set(status.size)
        self.ready.labels(namespace, name).set(status.ready_replicas)
        missing = max(0, status.replicas - status.ready_replicas)
        self.missing.labels(namespace, name).set(missing)
        self._gap.observe((namespace, name), missing > 0)
        self._observe_cost(namespace, name, status)
        self._phases[(namespace, name)] = (status.phase or Phase.PENDING).value
        self._count_phases()

    def _observe_cost(self, namespace: str, name: str, status: SpotpoolStatus) -> None:
        cost, full = status.hourly_cost, status.on_demand_hourly_cost
        for gauge, value in (
            (self.hourly_cost, cost),
            (self.hourly_savings, None if cost is None or full is None else full - cost),
        ):
            if value is None:  # unknown: no series rather than a wrong one
                with contextlib.suppress(KeyError):
                    gauge.remove(namespace, name)
            else:
                gauge.labels(namespace, name).set(round(value, 6))

    def observe_reclaims(
        self, namespace: str, name: str, status: SpotpoolStatus, slots: Iterable[int]
    ) -> None:
        """Count the slots' instances the cloud took (as `status` lists them, from before the
        reclaim), each under its zone and instance type."""
        listed = {i.slot: i for i in status.instances}
        for slot in slots:
            instance = listed.get(slot)
            labels = (
                (instance.zone if instance else None) or UNKNOWN,
                (instance.instance_type if instance else None) or UNKNOWN,
            )
            self._reclaim_labels.setdefault((namespace, name), set()).add(labels)
            self.reclaims.labels(namespace, name, *labels).inc()

    def observe_notice(self, result: str) -> None:
        if result not in NOTICE_RESULTS:
            raise ValueError(f"unknown notice result {result!r}")
        self.notice_reports.labels(result).inc()

    def observe_surges(self, before: SpotpoolStatus, after: SpotpoolStatus) -> None:
        """Count what became of the surge instances between two statuses of a pool: new ones
        started; gone from the surges, promoted when the slot lists it now, else retired."""
        earlier = {s.instance_id for s in before.surges}
        now = {s.instance_id for s in after.surges}
        listed = {i.instance_id for i in after.instances}
        self.surges.labels("started").inc(len(now - earlier))
        self.surges.labels("promoted").inc(len((earlier - now) & listed))
        self.surges.labels("retired").inc(len(earlier - now - listed))

    def observe_cloud_call(self, action: str, outcome: str) -> None:
        """An observer for engine.cloud.ON_CALL."""
        self.cloud_calls.labels(action, outcome).inc()

    def watch_buckets(self, buckets: Buckets) -> None:
        """Export the fill and the waits of these token buckets at every scrape."""
        self.registry.register(_TokenBuckets(buckets))

    def forget_pool(self, namespace: str, name: str) -> None:
        for metric in (
            self.desired, self.instances, self.ready, self.missing, self.hourly_cost,
            self.hourly_savings,
        ):  # fmt: skip
            with contextlib.suppress(KeyError):
                metric.remove(namespace, name)
        for labels in self._reclaim_labels.pop((namespace, name), set()):
            with contextlib.suppress(KeyError):
                self.reclaims.remove(namespace, name, *labels)
        self._gap.forget((namespace, name))
        self._phases.pop((namespace, name), None)
        self._count_phases()

    def _count_phases(self) -> None:
        for phase in Phase:
            self.pools.labels(phase.value).set(
                sum(1 for seen in self._phases.values() if seen == phase.value)
            )

    def serve(self, host: str, port: int) -> None:
        """Serve /metrics in a daemon thread (it ends with the process)."""
        start_http_server(port, addr=host, registry=self.registry)
