"""Learned interruption rates move placement, end to end (real kube-apiserver, operator
process, Pulumi engine, tencentcloud provider, emulator): two pools over a cheap and a dear
zone start in the cheap one; after the cloud reclaims there, the lowestInterruptionCost pool's
replacement goes to the dear, calm zone while the lowestPrice pool's goes back to the cheap one
(the operator avoids nothing here: --avoid-for 0, so only the learned rate differs). The counts
reach the install's ConfigMap and its metrics, and a restarted operator still knows them."""

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from spotpool.localworld.emulator import SECRET_ID, SECRET_KEY, SPOTPOOL
from spotpool.localworld.kube import Kube
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
TYPE = "S5.MEDIUM2"
CHEAP, DEAR = "ap-singapore-3", "ap-singapore-2"
LEASE = "learned-placement"  # a Lease of its own: other modules' operators share this cluster
CONFIGMAP = f"{LEASE}-interruptions"


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    directory = tmp_path_factory.mktemp("learned")
    with operator_world(
        kube,
        directory,
        refresh_seconds=10,
        env={
            "SPOTPOOL_AVOID_FOR": "0",
            # The install's namespace: the counts live in its ConfigMap, beside its Lease.
            "SPOTPOOL_LEASE_NAMESPACE": "default",
            "SPOTPOOL_LEASE_NAME": LEASE,
            "SPOTPOOL_LEASE_DURATION": "5s",  # the restarted operator takes it at once
        },
    ) as world:
        yield world


def zones(status: dict[str, Any]) -> dict[str, str]:
    return {str(i["instanceId"]): str(i["zone"]) for i in status.get("instances") or []}


def reclaim_and_wait(world: OperatorWorld, ns: str, name: str) -> dict[str, Any]:
    """Reclaim the pool's one instance through the emulator; its status once replaced."""
    (victim,) = zones(world.status(ns, name))
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [victim]})

    def replaced() -> dict[str, Any] | None:
        status = world.status(ns, name)
        now = zones(status)
        return status if now and victim not in now and status.get("readyReplicas") == 1 else None

    status: dict[str, Any] = world.wait_until(replaced, f"{name}'s replacement", timeout=180)
    return status


def stored_counts(world: OperatorWorld) -> dict[str, Any]:
    result = world.kube.run("-n", "default", "get", "configmap", CONFIGMAP, "-o", "json")
    if result.returncode != 0:
        return {}
    counts: dict[str, Any] = {}
    for key, text in (json.loads(result.stdout).get("data") or {}).items():
        if key.startswith("writer."):
            for offering, tally in json.loads(text).items():
                if offering.endswith(f"/{CHEAP}/{TYPE}") and tally["interruptions"] > 0:
                    counts[offering] = tally
    return counts


def test_learned_rates_move_new_slots_to_the_calm_zone_and_survive_a_restart(
    world: OperatorWorld,
) -> None:
    for zone, price in ((CHEAP, 0.006), (DEAR, 0.01)):  # the cheap zone 40 % cheaper
        world.emulator.admin_ok(
            "POST", "/_emulator/prices", {"Zone": zone, "InstanceType": TYPE, "Price": price}
        )
    ns = world.namespace()
    shape = {"availabilityZones": [DEAR, CHEAP], "instanceType": TYPE, "replicas": 1,
             "refreshInterval": "10s"}  # fmt: skip
    world.apply(ns, pool_manifest("learned", **shape))  # the default: lowestInterruptionCost
    world.apply(ns, pool_manifest("price", placementStrategy="lowestPrice", **shape))
    for name in ("learned", "price"):
        pool = world.wait_ready(ns, name, 1)
        assert list(zones(pool["status"]).values()) == [CHEAP]  # nothing learned yet: price

    price_status = reclaim_and_wait(world, ns, "price")
    assert list(zones(price_status).values()) == [CHEAP]  # price alone goes back
    learned_status = reclaim_and_wait(world, ns, "learned")
    assert list(zones(learned_status).values()) == [DEAR]  # the rate learned moved it

    placement = learned_status["placement"]
    assert placement["strategy"] == "lowestInterruptionCost"
    assert placement["message"].startswith(f"new slots go to {DEAR} {TYPE}")
    ranked = {o["zone"]: o for o in placement["offerings"]}
    assert [o["zone"] for o in placement["offerings"]] == [DEAR, CHEAP]
    assert ranked[CHEAP]["interruptionRate"] > 0 and ranked[DEAR]["interruptionRate"] == 0
    assert ranked[DEAR]["instances"] == 1

    # kept where a restart (and another replica) finds it, and exported
    def both_counted() -> dict[str, Any] | None:  # written every 30 s: both reclaims, decayed
        counts = stored_counts(world)
        return counts if sum(t["interruptions"] for t in counts.values()) > 1.9 else None

    world.wait_until(both_counted, "both reclaims counted in the ConfigMap", 120)
    metrics = world.metrics()
    assert "spotpool_offering_interruption_rate{" in metrics and CHEAP in metrics

    # `spotpool offerings` reads the same: price, stock and the learned rate, ranked
    env = {**os.environ, "KUBECONFIG": str(world.kube.kubeconfig),
           "TENCENTCLOUD_SECRET_ID": SECRET_ID, "TENCENTCLOUD_SECRET_KEY": SECRET_KEY}  # fmt: skip
    listed = subprocess.run(
        [str(SPOTPOOL), "offerings", "--region", "ap-singapore", "--zone", CHEAP, "--zone", DEAR,
         "--instance-type", TYPE, "--cloud-endpoint", world.emulator.endpoint,
         "--lease-namespace", "default", "--lease-name", LEASE, "--output", "json"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["zone"], r["price"]) for r in rows] == [(DEAR, 0.01), (CHEAP, 0.006)]
    assert rows[1]["interruptionRate"] > 0 and rows[1]["stock"] == "EnoughStock"

    world.stop()
    world.start()
    world.apply(ns, pool_manifest("after", **shape))
    after = world.wait_ready(ns, "after", 1)
    assert list(zones(after["status"]).values()) == [DEAR]  # the restart still knew
