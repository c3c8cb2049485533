"""Capacity-aware placement end to end (real kube-apiserver, operator process, Pulumi engine,
emulator): a sold-out zone, on-demand fallback and its way back to spot, and convergence under
injected throttling with no call of ours over its token bucket's rate."""

from collections.abc import Iterator
from typing import Any

import pytest

from spotpool.localworld.kube import Kube
from tests._support.buckets import most_over_bucket
from tests.e2e._support.pool_views import cloud_view, instances
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
# One instance type per test: the operator's stock cache and avoidances are per zone x type.
TYPE, FALLBACK_TYPE, THROTTLED_TYPE = "S5.LARGE8", "SA2.LARGE8", "S5.2XLARGE16"
ZONES = ["ap-singapore-2", "ap-singapore-3"]
# Low buckets, so the rate check below means something (Tencent's are 40/10/10/20 a second).
LIMITS = {
    "DescribeInstances": 3.0,
    "DescribeZoneInstanceConfigInfos": 2.0,
    "RunInstances": 2.0,
    "TerminateInstances": 2.0,
}


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    limits = ",".join(f"{k}={v}" for k, v in LIMITS.items())
    with operator_world(
        kube, tmp_path_factory.mktemp("capacity"), refresh_seconds=10,
        env={"SPOTPOOL_API_LIMITS": limits, "SPOTPOOL_AVOID_FOR": "3m"},
    ) as world:  # fmt: skip
        yield world


def stock(world: OperatorWorld, zone: str, available: int | None, kind: str = TYPE) -> None:
    world.emulator.admin_ok(
        "POST", "/_emulator/capacity", {"Zone": zone, "InstanceType": kind, "Available": available}
    )


def test_a_zone_sold_out_mid_run_moves_replacements_to_the_other_zone(
    world: OperatorWorld,
) -> None:
    ns = world.namespace()
    world.apply(
        ns,
        pool_manifest(
            "zones", availabilityZones=ZONES, instanceType=TYPE, replicas=2, refreshInterval="10s"
        ),
    )
    pool = world.wait_ready(ns, "zones", 2)
    uid = pool["metadata"]["uid"]
    placed = instances(pool["status"])
    assert sorted(i["zone"] for i in placed.values()) == ZONES  # spread over both zones
    (victim,) = [i for i, item in placed.items() if item["zone"] == ZONES[0]]

    stock(world, ZONES[0], 0)  # the first zone sells no more of it
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [victim]})

    def replaced() -> dict[str, Any] | None:
        status = world.status(ns, "zones")
        now = instances(status)
        done = victim not in now and len(now) == 2 and status.get("readyReplicas") == 2
        return status if done else None

    status = world.wait_until(replaced, "the replacement in the other zone", timeout=150)
    assert {i["zone"] for i in instances(status).values()} == {ZONES[1]}
    live = world.cloud(uid)
    assert sorted(live) == sorted(instances(status))
    created = [i for i in cloud_view(world, uid).values() if i["InstanceId"] not in placed]
    assert [i["Placement"]["Zone"] for i in created] == [ZONES[1]]  # never tried the sold-out one
    stock(world, ZONES[0], None)


def test_on_demand_fallback_fills_a_pool_without_spot_stock_and_returns_to_spot(
    world: OperatorWorld,
) -> None:
    for zone in ZONES:
        stock(world, zone, 0, FALLBACK_TYPE)  # no spot stock anywhere
    ns = world.namespace()
    world.apply(
        ns,
        pool_manifest(
            "fallback",
            availabilityZones=ZONES,
            instanceType=FALLBACK_TYPE,
            replicas=2,
            refreshInterval="10s",
            onDemandFallback={"enabled": True, "maxOnDemand": 2, "returnAfter": "10s"},
        ),
    )
    pool = world.wait_ready(ns, "fallback", 2)
    uid = pool["metadata"]["uid"]
    status = pool["status"]
    assert {i["chargeType"] for i in instances(status).values()} == {"POSTPAID_BY_HOUR"}
    assert status["onDemandReplicas"] == 2
    on_demand = set(instances(status))
    assert {i["InstanceChargeType"] for i in world.emulator.all_instances()
            if i["InstanceId"] in on_demand} == {"POSTPAID_BY_HOUR"}  # fmt: skip

    for zone in ZONES:
        stock(world, zone, None, FALLBACK_TYPE)  # spot stock is back

    def back_on_spot() -> dict[str, Any] | None:
        status = world.status(ns, "fallback")
        now = instances(status)
        done = (
            len(now) == 2
            and status.get("readyReplicas") == 2
            and {i.get("chargeType") for i in now.values()} == {"SPOTPAID"}
            and status.get("onDemandReplicas") == 0
        )
        return status if done else None

    status = world.wait_until(back_on_spot, "the pool back on spot", timeout=180)
    assert not on_demand & set(instances(status))
    assert sorted(world.cloud(uid)) == sorted(instances(status))  # the on-demand ones are gone
    everything = cloud_view(world, uid).values()
    # No flapping: two on-demand instances, then two spot ones, nothing else.
    assert (
        sorted(i["InstanceChargeType"] for i in everything)
        == ["POSTPAID_BY_HOUR"] * 2 + ["SPOTPAID"] * 2
    )
    assert "BackToSpot" in world.reasons(ns, "fallback")


def test_twenty_percent_throttling_converges_and_no_call_exceeds_its_bucket(
    world: OperatorWorld,
) -> None:
    world.emulator.admin_ok(
        "POST",
        "/_emulator/faults",
        {"Service": "*", "Action": "*", "Code": "RequestLimitExceeded", "Rate": 0.2},
    )
    try:
        ns = world.namespace()
        world.apply(
            ns,
            pool_manifest(
                "throttled",
                availabilityZones=ZONES,
                instanceType=THROTTLED_TYPE,
                replicas=2,
                refreshInterval="10s",
            ),
        )
        pool = world.wait_ready(ns, "throttled", 2, timeout=240)
        victim = next(iter(instances(pool["status"])))
        world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [victim]})

        def replaced() -> dict[str, Any] | None:
            status = world.status(ns, "throttled")
            now = instances(status)
            done = victim not in now and len(now) == 2 and status.get("readyReplicas") == 2
            return status if done else None

        world.wait_until(replaced, "the replacement under throttling", timeout=240)
        calls = world.emulator.admin_ok("GET", "/_emulator/requests")["Requests"]
    finally:
        world.emulator.admin_ok("DELETE", "/_emulator/faults")

    assert any(c["Code"] == "RequestLimitExceeded" for c in calls)  # the faults did bite
    ours = [c for c in calls if str(c["Client"]).startswith("SDK_PYTHON")]
    checked = 0
    for action, rate in LIMITS.items():
        times = sorted(c["Time"] for c in ours if c["Action"] == action)
        checked += len(times)
        worst = most_over_bucket(times, rate, burst=max(1.0, rate))
        assert worst <= 1, f"{action}: {worst:.1f} calls over a {rate}/s bucket"
    assert checked > 0
