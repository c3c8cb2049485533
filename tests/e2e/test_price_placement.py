"""Price-capacity-optimized placement end to end (real kube-apiserver, operator process, Pulumi
engine, tencentcloud provider, emulator): a pool goes to the cheaper of two zones with stock,
and when that zone's spot price passes the pool's spotMaxPrice the emulator reclaims its
instances (as the cloud does) and their replacements go to the other zone."""

from collections.abc import Iterator
from typing import Any

import pytest

from spotpool.localworld.kube import Kube
from tests.e2e._support.pool_views import cloud_view, instances
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
# One instance type per test: the operator's stock cache and avoidances are per zone x type.
TYPE, SPREAD_TYPE = "S5.MEDIUM4", "SA2.MEDIUM4"
CHEAP, DEAR = "ap-singapore-3", "ap-singapore-2"
MAX_PRICE = "0.03"


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    with operator_world(kube, tmp_path_factory.mktemp("prices"), refresh_seconds=10) as world:
        yield world


def set_price(world: OperatorWorld, zone: str, price: float, kind: str = TYPE) -> list[str]:
    reply = world.emulator.admin_ok(
        "POST", "/_emulator/prices", {"Zone": zone, "InstanceType": kind, "Price": price}
    )
    return list(reply["Reclaimed"])


def test_a_pool_goes_to_the_cheapest_zone_and_moves_when_it_passes_the_max_price(
    world: OperatorWorld,
) -> None:
    assert set_price(world, CHEAP, 0.01) == [] and set_price(world, DEAR, 0.02) == []
    ns = world.namespace()
    world.apply(
        ns,
        pool_manifest(
            "cheap",
            availabilityZones=[DEAR, CHEAP],  # the spec's order puts the dear zone first
            instanceType=TYPE,
            replicas=2,
            spotMaxPrice=MAX_PRICE,
            refreshInterval="10s",
        ),
    )
    pool = world.wait_ready(ns, "cheap", 2)
    uid = pool["metadata"]["uid"]
    first = instances(pool["status"])
    assert [i["zone"] for i in first.values()] == [CHEAP, CHEAP]  # price, not spread or order
    assert {i["Placement"]["Zone"] for i in cloud_view(world, uid).values()} == {CHEAP}

    # The market in the cheap zone passes the pool's max price: the cloud takes both back.
    reclaimed = set_price(world, CHEAP, 0.05)
    assert sorted(reclaimed) == sorted(first)

    def moved() -> dict[str, Any] | None:
        status = world.status(ns, "cheap")
        now = instances(status)
        done = len(now) == 2 and not set(now) & set(first) and status.get("readyReplicas") == 2
        return status if done else None

    status = world.wait_until(moved, "the replacements in the other zone", timeout=180)
    assert [i["zone"] for i in instances(status).values()] == [DEAR, DEAR]
    assert sorted(world.cloud(uid)) == sorted(instances(status))
    everything = cloud_view(world, uid)
    created = [i for i in everything.values() if i["InstanceId"] not in first]
    assert [i["Placement"]["Zone"] for i in created] == [DEAR, DEAR]  # never the dear zone again
    assert {everything[i]["GoneReason"] for i in first} == {"reclaimed"}
    assert "Reclaimed" in world.reasons(ns, "cheap")


def test_capacity_optimized_ignores_the_price_and_spreads(world: OperatorWorld) -> None:
    set_price(world, CHEAP, 0.01, SPREAD_TYPE)
    set_price(world, DEAR, 0.02, SPREAD_TYPE)
    ns = world.namespace()
    world.apply(
        ns,
        pool_manifest(
            "spread",
            availabilityZones=[DEAR, CHEAP],
            instanceType=SPREAD_TYPE,
            replicas=2,
            spotMaxPrice=MAX_PRICE,
            placementStrategy="capacityOptimized",
            refreshInterval="10s",
        ),
    )
    pool = world.wait_ready(ns, "spread", 2)
    assert sorted(i["zone"] for i in instances(pool["status"]).values()) == sorted([DEAR, CHEAP])
