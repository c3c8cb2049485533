"""The storm fast path end to end: a reclaimed slot's next instance is launched through the
cloud API before the pool's Pulumi run, which adopts it; a kill between the launch and the
adoption, the operator coming back under another hostname, never gives a slot two instances.
A real kube-apiserver, the emulator, the real Pulumi engine and the operator as a process."""

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from spotpool.localworld.kube import Kube
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    with operator_world(kube, tmp_path_factory.mktemp("fast-path"), refresh_seconds=10) as world:
        yield world


def _ids(status: dict[str, Any]) -> list[str]:
    return sorted(str(i["instanceId"]) for i in status.get("instances") or [])


def _run_instances(world: OperatorWorld, since: float) -> list[dict[str, Any]]:
    calls = world.emulator.admin_ok("GET", "/_emulator/requests")["Requests"]
    return [c for c in calls if c["Action"] == "RunInstances" and c["Time"] >= since]


def _fast(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fast path's RunInstances: ours carry a ClientToken, the provider's never do."""
    return [c for c in calls if (c.get("Params") or {}).get("ClientToken")]


def _reclaim(world: OperatorWorld, victims: list[str]) -> float:
    calls = world.emulator.admin_ok("GET", "/_emulator/requests")["Requests"]
    since = max((c["Time"] for c in calls), default=0.0)
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": victims})
    return since


def test_reclaims_are_launched_ahead_and_adopted(world: OperatorWorld) -> None:
    ns = world.namespace()
    world.apply(ns, pool_manifest("ahead", replicas=3))
    pool = world.wait_ready(ns, "ahead", 3)
    uid = pool["metadata"]["uid"]
    before = _ids(pool["status"])
    victims = before[:2]

    since = _reclaim(world, victims)

    def whole() -> dict[str, Any] | None:
        status = world.status(ns, "ahead")
        ids = _ids(status)
        gone = set(victims) & set(ids)
        return status if not gone and len(ids) == 3 and status.get("readyReplicas") == 3 else None

    status = world.wait_until(whole, "the reclaimed slots replaced", timeout=240)
    calls = _run_instances(world, since)
    fast = _fast(calls)
    new = sorted(set(_ids(status)) - set(before))
    print(f"RunInstances after the reclaim: {len(calls)}, of them the fast path's {len(fast)}")
    assert len(new) == 2
    assert len(calls) == len(fast) == 2, calls  # the Pulumi run adopted, created nothing
    assert sorted(world.cloud(uid)) == _ids(status)  # no leak, no duplicate
    assert "launched ahead of the Pulumi run" in world.log.read_text(errors="replace")


def test_a_kill_between_launch_and_adoption_never_gives_a_slot_two_instances(
    world: OperatorWorld,
) -> None:
    ns = world.namespace()
    world.apply(ns, pool_manifest("killed-ahead", replicas=3))
    pool = world.wait_ready(ns, "killed-ahead", 3)
    uid = pool["metadata"]["uid"]
    before = _ids(pool["status"])
    victim = before[0]

    since = _reclaim(world, [victim])
    world.wait_until(lambda: _fast(_run_instances(world, since)), "the fast path's launch", 120)
    # Hold the adoption's refresh back so the kill lands before it; then the pod is gone.
    world.emulator.admin_ok(
        "POST", "/_emulator/faults", {"Action": "DescribeInstances", "Rate": 0, "LatencyMs": 8000}
    )
    world.kill()
    world.emulator.admin_ok("DELETE", "/_emulator/faults")
    assert sorted(world.cloud(uid)) != _ids(world.status(ns, "killed-ahead"))  # not adopted
    world.hostname = f"spotpool-operator-{uuid.uuid4().hex[:6]}"
    world.start()

    def whole() -> dict[str, Any] | None:
        status = world.status(ns, "killed-ahead")
        ids = _ids(status)
        return (
            status
            if victim not in ids and len(ids) == 3 and status.get("readyReplicas") == 3
            else None
        )

    status = world.wait_until(whole, "the slot adopted after the restart", timeout=300)
    world.hostname = None
    calls = _run_instances(world, since)
    made = {str(c.get("InstanceId") or "") for c in calls}
    print(f"RunInstances after the reclaim: {len(calls)} ({len(_fast(calls))} fast path)")
    assert sorted(world.cloud(uid)) == _ids(status)  # the slot holds one instance, none leak
    assert len(set(_ids(status)) - set(before)) == 1
    assert all(c in _fast(calls) for c in calls), made  # only the launch (or its retry)
