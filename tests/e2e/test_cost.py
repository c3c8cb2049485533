"""Cost you can see, end to end (real kube-apiserver, operator process, Pulumi engine,
emulator): each instance's price, the pool's hourly cost and on-demand cost in the status, the
cost metrics and the COST column all equal the emulator's listed prices x the instances, for a
pool of two spot instances and for one with an on-demand fallback."""

import json
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tencentcloud.common import credential
from tencentcloud.cvm.v20170312 import cvm_client, models

from spotpool.localworld.kube import Kube
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
REGION, ZONE = "ap-singapore", "ap-singapore-2"
SPOT_TYPE, FALLBACK_TYPE = "GN7.2XLARGE32", "GN7.5XLARGE80"  # the fallback test's own type


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    with operator_world(kube, tmp_path_factory.mktemp("cost"), refresh_seconds=10) as world:
        yield world


def listed_prices(world: OperatorWorld, kind: str) -> dict[str, tuple[float, float]]:
    """charge type -> (UnitPrice, UnitPriceDiscount) of `kind` in ZONE, asked of the emulator
    with the official SDK, as any client would."""
    request = models.DescribeZoneInstanceConfigInfosRequest()
    request.from_json_string(
        json.dumps({"Filters": [{"Name": "zone", "Values": [ZONE]},
                                {"Name": "instance-type", "Values": [kind]}]})
    )  # fmt: skip
    emulator = world.emulator
    keys = credential.Credential(emulator.secret_id, emulator.secret_key)
    client = cvm_client.CvmClient(keys, REGION, emulator._profile())  # the pools' region
    items = client.DescribeZoneInstanceConfigInfos(request).InstanceTypeQuotaSet
    return {
        i.InstanceChargeType: (i.Price.UnitPrice, i.Price.UnitPriceDiscount)
        for i in items
        if i.InstanceChargeType in ("SPOTPAID", "POSTPAID_BY_HOUR")
    }


def metric(world: OperatorWorld, name: str, namespace: str, pool: str) -> float | None:
    for family in text_string_to_metric_families(world.metrics()):
        for sample in family.samples:
            if sample.name == name and sample.labels == {"namespace": namespace, "pool": pool}:
                return float(sample.value)
    return None


def priced(world: OperatorWorld, ns: str, name: str, count: int) -> dict[str, Any]:
    """The status once it lists `count` RUNNING instances and a cost."""

    def done() -> dict[str, Any] | None:
        status = world.status(ns, name)
        instances = status.get("instances") or []
        ok = (
            status.get("readyReplicas") == count
            and len(instances) == count
            and status.get("hourlyCost") is not None
        )
        return status if ok else None

    found: dict[str, Any] = world.wait_until(done, f"{name}: {count} instances and a cost")
    return found


def test_a_spot_pool_costs_its_instances_spot_prices_and_shows_its_savings(
    world: OperatorWorld,
) -> None:
    ns = world.namespace()
    world.apply(ns, pool_manifest("spot", instanceType=SPOT_TYPE, replicas=2))
    status = priced(world, ns, "spot", 2)
    prices = listed_prices(world, SPOT_TYPE)
    spot, on_demand = prices["SPOTPAID"][1], prices["POSTPAID_BY_HOUR"][1]
    assert spot < on_demand

    assert [i["price"] for i in status["instances"]] == [spot, spot]
    assert status["hourlyCost"] == pytest.approx(2 * spot)
    assert status["onDemandHourlyCost"] == pytest.approx(2 * on_demand)
    cost = metric(world, "spotpool_pool_hourly_cost", ns, "spot")
    saved = metric(world, "spotpool_pool_hourly_savings", ns, "spot")
    assert cost == pytest.approx(2 * spot)
    assert saved == pytest.approx(2 * (on_demand - spot))

    header, *rows = world.kube.ok("-n", ns, "get", "spotpools").splitlines()
    table = dict(zip(header.split(), rows[0].split(), strict=True))
    assert float(table["COST"]) == pytest.approx(2 * spot)


def test_an_on_demand_fallback_costs_the_on_demand_price(world: OperatorWorld) -> None:
    # One spot instance of the type left in the zone: the pool's second slot falls back.
    world.emulator.admin_ok(
        "POST", "/_emulator/capacity", {"Zone": ZONE, "InstanceType": FALLBACK_TYPE, "Available": 1}
    )
    ns = world.namespace()
    world.apply(
        ns,
        pool_manifest(
            "fallback", instanceType=FALLBACK_TYPE, replicas=2,
            onDemandFallback={"enabled": True, "maxOnDemand": 1, "returnAfter": "1h"},
        ),
    )  # fmt: skip
    status = priced(world, ns, "fallback", 2)
    prices = listed_prices(world, FALLBACK_TYPE)
    spot, on_demand = prices["SPOTPAID"][1], prices["POSTPAID_BY_HOUR"][1]

    charged = sorted((i["chargeType"], i["price"]) for i in status["instances"])
    assert charged == [("POSTPAID_BY_HOUR", on_demand), ("SPOTPAID", spot)]
    assert status["onDemandReplicas"] == 1
    assert status["hourlyCost"] == pytest.approx(spot + on_demand)
    assert status["onDemandHourlyCost"] == pytest.approx(2 * on_demand)
    assert metric(world, "spotpool_pool_hourly_cost", ns, "fallback") == pytest.approx(
        spot + on_demand
    )
    assert metric(world, "spotpool_pool_hourly_savings", ns, "fallback") == pytest.approx(
        on_demand - spot
    )
    # the cloud billed them so: one spot and one on-demand instance of the pool's type
    billed = sorted(
        i["InstanceChargeType"]
        for i in world.emulator.all_instances()
        if i["InstanceId"] in {x["instanceId"] for x in status["instances"]}
    )
    assert billed == ["POSTPAID_BY_HOUR", "SPOTPAID"]
    world.emulator.admin_ok(
        "POST",
        "/_emulator/capacity",
        {"Zone": ZONE, "InstanceType": FALLBACK_TYPE, "Available": None},
    )
