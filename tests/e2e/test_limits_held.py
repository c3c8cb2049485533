"""Limits that hold, end to end (real kube-apiserver, operator process, Pulumi engine, emulator;
issue 46, builds 1-2): every launch is reserved in the policy's ledger before it is made, and
what cannot be priced or counted does not grow. Each test has a namespace and a policy limiting
it; its live instances are sampled every second from the emulator and the highest count is
printed beside the limit.

- a pool held at its limit fills within one refresh once the admin raises the limit, no spec
  edit (it stayed held for good);
- 20 pools applied by one `kubectl apply` under a limit of 10 instances never run more than 10
  (each saw the others' last status, 0, and took its own);
- a pool at its limit deleted with deletionPolicy Retain and applied again is held: its kept
  instances stay reserved (they counted nowhere);
- under a cost limit a new pool (no cost yet) and a primed one (one cheap instance, then a GPU
  type) are held at what the quotes allow; under a GPU limit a GPU type of no static table is
  counted from the cloud's data (it counted none);
- a termination notice and a rollout at the limit make no surge instance past it.
"""

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from spotpool.localworld.kube import Kube
from spotpool.ports import free_port
from tests.e2e._support.limits import (
    limit,
    policy_row,
    post_notice,
    race,
    reservations,
    sampled,
)
from tests.e2e._support.pool_views import by_slot
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
REFRESH = 20  # seconds: the operator's refresh interval here
V1, V2 = "#!/bin/sh\necho v1\n", "#!/bin/sh\necho v2\n"


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    env = {"SPOTPOOL_NOTICE_PORT": str(free_port())}
    directory = tmp_path_factory.mktemp("limits")
    with operator_world(
        kube, directory, refresh_seconds=REFRESH, namespace_prefix="limits-", env=env
    ) as operator:
        try:
            yield operator
        finally:
            names = [f"e2e-limits-{ns}" for ns in operator.namespaces]
            kube.run("delete", "spotpoolaccesspolicies", *names, "--wait=false")


def _held(world: OperatorWorld, namespace: str, name: str) -> str:
    """The pool's Limited message, once it says it is held."""
    found: dict[str, Any] = world.wait_until(
        lambda: world.condition(namespace, name, "Limited") or None, f"{name} held", 120
    )
    assert found["status"] == "True" and found["reason"] == "NamespaceLimit"
    return str(found["message"])


def _pools(world: OperatorWorld, namespace: str) -> list[dict[str, Any]]:
    return world.pools(namespace)


def test_a_held_pool_fills_within_one_refresh_after_its_limit_is_raised(
    world: OperatorWorld,
) -> None:
    ns = world.namespace()
    limit(world, ns, instances=1)
    world.apply(ns, pool_manifest("held", replicas=2))
    assert "held at 1 of 2 instances" in _held(world, ns, "held")
    world.wait_ready(ns, "held", 1)
    raised = time.time()
    limit(world, ns, instances=2)  # the admin raises it; the spec is not touched
    filled = world.wait_ready(ns, "held", 2, timeout=REFRESH + 120)
    took = time.time() - raised
    up = filled["status"]["stack"]["lastOperation"]
    began = datetime.fromisoformat(up["startTime"].replace("Z", "+00:00")).timestamp() - raised
    print(f"\n[limits] a held pool filled {took:.1f} s after its limit was raised, by an up "
          f"begun after {began:.0f} s (refresh interval {REFRESH} s)")  # fmt: skip
    assert up["kind"] == "up" and began <= REFRESH  # within one refresh, whatever the up takes
    assert world.condition(ns, "held", "Limited") == {}
    assert len(world.cloud(filled["metadata"]["uid"])) == 2


def test_twenty_pools_applied_at_once_never_pass_a_limit_of_ten(
    world: OperatorWorld, tmp_path: Path
) -> None:
    ns = world.namespace()
    policy = limit(world, ns, instances=10)
    most, running, held = race(world, ns, tmp_path, 20)
    print(f"\n[limits] 20 pools of 1 at once, limit 10: at most {most} live, {running} running, "
          f"{held} held")  # fmt: skip
    assert most <= 10 and (running, held) == (10, 10)
    assert sum(r["instances"] for r in reservations(world, policy).values()) == 10
    row = policy_row(world, policy)
    assert (row["RESERVED"], row["MAX-INSTANCES"]) == ("10", "10")


def test_the_retain_delete_loop_is_held_at_the_limit(world: OperatorWorld) -> None:
    ns = world.namespace()
    policy = limit(world, ns, instances=2)
    manifest = pool_manifest("kept", replicas=2, deletionPolicy="Retain")
    with sampled(world, ns) as live:
        world.apply(ns, manifest)
        world.wait_ready(ns, "kept", 2)
        for _ in range(2):  # delete (the instances are kept), apply again
            world.kube.ok("-n", ns, "delete", "spotpool", "kept", "--timeout=120s")
            world.apply(ns, manifest)
            assert "held at 0 of 2 instances" in _held(world, ns, "kept")
    print(f"\n[limits] retain-delete loop, limit 2: at most {live.most} live")
    assert live.most == 2 and live.samples[-1] == 2
    retained = [r for r in reservations(world, policy).values() if r.get("retained")]
    assert sum(r["instances"] for r in retained) == 2


def test_cost_and_gpu_limits_price_and_count_the_planned_launch(world: OperatorWorld) -> None:
    fresh, primed, gpus = world.namespace(), world.namespace(), world.namespace()
    limit(world, fresh, hourlyCost=1.0)
    limit(world, primed, hourlyCost=1.0)
    limit(world, gpus, gpus=2)
    # GN7.2XLARGE32: 0.444 an hour on spot here; S5.MEDIUM4 0.028; PNV4.7XLARGE116 one A10
    world.apply(fresh, pool_manifest("fresh", replicas=4))
    world.apply(primed, pool_manifest("primed", instanceType="S5.MEDIUM4", replicas=1))
    world.apply(gpus, pool_manifest("a10", instanceType="PNV4.7XLARGE116", replicas=3))
    with sampled(world, fresh) as new, sampled(world, primed) as cheap, sampled(world, gpus) as a10:
        world.wait_ready(primed, "primed", 1)
        world.apply(primed, pool_manifest("primed", replicas=4))  # now a GPU type
        assert "to 1 an hour" in _held(world, fresh, "fresh")
        assert "to 2 GPUs" in _held(world, gpus, "a10")
        statuses = [world.wait_ready(ns, name, 2)["status"] for ns, name in
                    ((fresh, "fresh"), (primed, "primed"), (gpus, "a10"))]  # fmt: skip
    costs = [s["hourlyCost"] for s in statuses[:2]]
    print(f"\n[limits] cost limit 1.0 an hour: new pool at most {new.most} live ({costs[0]} "
          f"an hour), primed at most {cheap.most} ({costs[1]} an hour); GPU limit 2: at most "
          f"{a10.most} A10s")  # fmt: skip
    assert (new.most, cheap.most, a10.most) == (2, 2, 2)
    assert statuses[0]["hourlyCost"] <= 1.0 and statuses[1]["hourlyCost"] <= 1.0
    assert {i["instanceType"] for i in statuses[1]["instances"]} == {"GN7.2XLARGE32"}
    assert [i["gpus"] for i in statuses[2]["instances"]] == [1, 1]  # the cloud's count


def test_a_notice_surge_and_a_rollout_surge_at_the_limit_stay_within_it(
    world: OperatorWorld,
) -> None:
    ns = world.namespace()
    limit(world, ns, instances=1)
    manifest = pool_manifest("surging", replicas=1, userData=V1,
                             disruption={"maxUnavailable": 1, "maxSurge": 2})  # fmt: skip
    world.apply(ns, manifest)
    first = by_slot(world.wait_ready(ns, "surging", 1)["status"])
    with sampled(world, ns) as live:
        code, message = post_notice(world, first[0])
        assert code == 202, message
        world.wait_until(lambda: "SurgeHeld" in world.reasons(ns, "surging"), "surge held", 60)
        noticed = live.most
        manifest["spec"]["userData"] = V2  # replaces every instance: a rollout
        world.apply(ns, manifest)

        def rolled() -> bool:
            status = world.status(ns, "surging")
            now = by_slot(status)
            return len(now) == 1 and not set(now.values()) & set(first.values()) and (
                status.get("readyReplicas") == 1 and status.get("phase") == "Ready")  # fmt: skip

        world.wait_until(rolled, "the rollout", 240)
    print(f"\n[limits] limit 1: notice at most {noticed} live; with the rollout (maxSurge 2) "
          f"at most {live.most}")  # fmt: skip
    assert noticed == 1 and live.most == 1
    assert not world.status(ns, "surging").get("surges")


def test_a_return_to_spot_at_the_limit_stays_within_it(world: OperatorWorld) -> None:
    """Before: moving on-demand fallbacks back to spot was one plain up, each slot replaced
    create-before-delete outside any reservation (4 live under a limit of 2)."""
    kind, zones = "SA2.LARGE8", ["ap-singapore-2", "ap-singapore-3"]

    def stock(available: int | None) -> None:
        for zone in zones:
            offer = {"Zone": zone, "InstanceType": kind, "Available": available}
            world.emulator.admin_ok("POST", "/_emulator/capacity", offer)

    ns = world.namespace()
    limit(world, ns, instances=2)
    stock(0)  # no spot stock: the pool starts on demand
    manifest = pool_manifest(
        "returning", replicas=2, instanceType=kind, availabilityZones=zones,
        refreshInterval="10s", disruption={"maxUnavailable": 1, "maxSurge": 1},
        onDemandFallback={"enabled": True, "maxOnDemand": 2, "returnAfter": "10s"},
    )  # fmt: skip
    world.apply(ns, manifest)
    on_demand = by_slot(world.wait_ready(ns, "returning", 2)["status"])
    with sampled(world, ns) as live:
        stock(None)  # spot stock is back

        def on_spot() -> bool:
            status = world.status(ns, "returning")
            now = status.get("instances") or []
            return len(now) == 2 and status.get("readyReplicas") == 2 and (
                {i.get("chargeType") for i in now} == {"SPOTPAID"})  # fmt: skip

        world.wait_until(on_spot, "the pool back on spot", 240)
    print(f"\n[limits] limit 2: a return to spot of 2 slots at most {live.most} live")
    assert not set(on_demand.values()) & set(by_slot(world.status(ns, "returning")).values())
    assert live.most <= 2
