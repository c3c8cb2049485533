"""The operator's metrics: pools by phase, the capacity gap, reclaims by zone and type, cloud
calls and the token buckets, as a scrape reads them."""

import pytest
from spotpool_operator.reporting.metrics import NOTICE_RESULTS, Metrics

from spotpool.api.status import Instance, Phase, SpotpoolStatus, Surge
from spotpool.engine.tencent.ratelimit import Buckets, RateLimits

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _status(replicas: int, ready: int, phase: Phase) -> SpotpoolStatus:
    instances = [
        Instance(instance_id=f"ins-{n}", slot=n, zone="ap-singapore-2",
                 instance_type="GN7.2XLARGE32", state="RUNNING")
        for n in range(ready)
    ]  # fmt: skip
    return SpotpoolStatus(
        replicas=replicas, ready_replicas=ready, size=ready, instances=instances, phase=phase
    )


def _value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_pools_are_counted_by_phase_and_every_phase_is_there_from_the_start() -> None:
    metrics = Metrics()
    assert {_value(metrics, "spotpool_pools", phase=p.value) for p in Phase} == {0.0}
    metrics.observe_pool("a", "one", _status(2, 2, Phase.READY))
    metrics.observe_pool("a", "two", _status(2, 1, Phase.CONVERGING))
    metrics.observe_pool("b", "one", _status(1, 1, Phase.READY))
    assert _value(metrics, "spotpool_pools", phase="Ready") == 2
    assert _value(metrics, "spotpool_pools", phase="Converging") == 1
    metrics.observe_pool("a", "two", _status(2, 2, Phase.READY))  # moves, not added
    metrics.forget_pool("b", "one")
    assert _value(metrics, "spotpool_pools", phase="Ready") == 2
    assert _value(metrics, "spotpool_pools", phase="Converging") == 0


def test_the_capacity_gap_counts_the_seconds_a_pool_is_short_up_to_the_scrape() -> None:
    clock = Clock()
    metrics = Metrics(clock=clock)
    metrics.observe_pool("a", "gpu", _status(3, 3, Phase.READY))
    clock.now += 50
    metrics.observe_pool("a", "gpu", _status(3, 1, Phase.CONVERGING))  # two reclaimed
    assert _value(metrics, "spotpool_pool_missing_instances", namespace="a", pool="gpu") == 2
    clock.now += 4
    # still short: the seconds so far are there without another status write
    assert _value(metrics, "spotpool_pool_short_seconds_total", namespace="a", pool="gpu") == 4
    metrics.observe_pool("a", "gpu", _status(3, 2, Phase.CONVERGING))  # one back: still short
    clock.now += 3
    metrics.observe_pool("a", "gpu", _status(3, 3, Phase.READY))
    clock.now += 100
    assert _value(metrics, "spotpool_pool_short_seconds_total", namespace="a", pool="gpu") == 7
    assert _value(metrics, "spotpool_pool_missing_instances", namespace="a", pool="gpu") == 0
    metrics.forget_pool("a", "gpu")
    assert _value(metrics, "spotpool_pool_short_seconds_total", namespace="a", pool="gpu") is None


def test_reclaims_are_counted_by_zone_and_instance_type_and_forgotten_with_the_pool() -> None:
    metrics = Metrics()
    before = _status(3, 3, Phase.READY)
    metrics.observe_reclaims("a", "gpu", before, [0, 2, 7])  # slot 7: not in the status
    where = {"namespace": "a", "pool": "gpu"}
    known = {"zone": "ap-singapore-2", "instance_type": "GN7.2XLARGE32"}
    assert _value(metrics, "spotpool_reclaims_total", **where, **known) == 2
    unknown = {"zone": "unknown", "instance_type": "unknown"}
    assert _value(metrics, "spotpool_reclaims_total", **where, **unknown) == 1
    metrics.forget_pool("a", "gpu")
    assert _value(metrics, "spotpool_reclaims_total", **where, **known) is None


def test_cloud_calls_failures_and_token_buckets_are_exported_without_key_pairs() -> None:
    metrics = Metrics()
    buckets = Buckets(RateLimits(rates={"DescribeInstances": 2.0}))
    metrics.watch_buckets(buckets)
    for secret_id in ("AKIDone", "AKIDtwo"):
        bucket = buckets.bucket(secret_id, "ap-singapore", "DescribeInstances")
        bucket.reserve()
    buckets.bucket("AKIDone", "ap-singapore", "DescribeInstances").reserve()
    buckets.bucket("200000000001", "ap-singapore", "DescribeInstances")  # an assumed role's
    metrics.observe_cloud_call("DescribeInstances", "ok")
    metrics.observe_cloud_call("DescribeInstances", "throttled")
    metrics.observe_failure("up", "ResourceInsufficient")

    where = {"account": "", "region": "ap-singapore", "action": "DescribeInstances"}
    fill = _value(metrics, "spotpool_cloud_api_bucket_fill_ratio", **where)
    assert fill is not None and fill < 0.1  # the emptier key pair's bucket: 2 of 2 taken
    assert _value(metrics, "spotpool_cloud_api_bucket_wait_seconds_total", **where) is not None
    role = {**where, "account": "200000000001"}  # the role's account, apart: untouched
    assert _value(metrics, "spotpool_cloud_api_bucket_fill_ratio", **role) == 1.0
    calls = "spotpool_cloud_api_calls_total"
    assert _value(metrics, calls, action="DescribeInstances", result="throttled") == 1
    assert _value(metrics, "spotpool_failures_total", kind="up", reason="ResourceInsufficient")
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    assert "AKID" not in text


def test_operations_in_flight_and_queued_start_at_zero() -> None:
    metrics = Metrics()
    assert _value(metrics, "spotpool_operations_in_flight") == 0
    assert _value(metrics, "spotpool_operations_queued") == 0
    metrics.observe_operation("up", True, 2.0)
    assert _value(metrics, "spotpool_operation_duration_seconds_bucket", kind="up", le="2.5") == 1


def test_notice_reports_and_surges_are_there_at_zero_and_counted() -> None:
    metrics = Metrics()
    for result in NOTICE_RESULTS:
        assert _value(metrics, "spotpool_notice_reports_total", result=result) == 0
    for event in ("started", "promoted", "retired"):
        assert _value(metrics, "spotpool_surges_total", event=event) == 0
    metrics.observe_notice("accepted")
    metrics.observe_notice("bad_signature")
    assert _value(metrics, "spotpool_notice_reports_total", result="accepted") == 1
    assert _value(metrics, "spotpool_notice_reports_total", result="bad_signature") == 1

    before = _status(3, 3, Phase.READY)  # ins-0, ins-1, ins-2 in slots 0-2
    noticed = before.model_copy(
        update={
            "surges": [Surge(slot=0, instance_id="ins-s0"), Surge(slot=1, instance_id="ins-s1")]
        }
    )
    metrics.observe_surges(before, noticed)
    assert _value(metrics, "spotpool_surges_total", event="started") == 2
    # slot 0's instance reclaimed: its surge takes the slot; slot 1's never was: retired
    instances = [i.model_copy(update={"instance_id": "ins-s0"}) if i.slot == 0 else i
                 for i in before.instances]  # fmt: skip
    metrics.observe_surges(noticed, before.model_copy(update={"instances": instances}))
    assert _value(metrics, "spotpool_surges_total", event="promoted") == 1
    assert _value(metrics, "spotpool_surges_total", event="retired") == 1
    assert _value(metrics, "spotpool_surges_total", event="started") == 2
