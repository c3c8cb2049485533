"""spec.disruption end to end (real kube-apiserver, operator process, Pulumi engine, tencentcloud
provider, emulator): a user-data change of a pool of 4 with maxUnavailable 1 and maxSurge 1 is
rolled out by the operator in two batches, the slot annotated do-not-disrupt in the last one,
and never more than 4 + 1 instances in the cloud (the emulator's request log, replayed)."""

from collections.abc import Iterator
from typing import Any

import pytest

from spotpool.engine.stacks.disruption import DO_NOT_DISRUPT
from spotpool.localworld.kube import Kube
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
V1, V2 = "#!/bin/sh\necho v1\n", "#!/bin/sh\necho v2\n"


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    with operator_world(kube, tmp_path_factory.mktemp("disruption")) as world:
        yield world


def _manifest(user_data: str) -> dict[str, Any]:
    manifest = pool_manifest(
        "train",
        replicas=4,
        maximum=6,
        userData=user_data,
        disruption={"maxUnavailable": 1, "maxSurge": 1},
    )
    manifest["metadata"]["annotations"] = {DO_NOT_DISRUPT: "0"}
    return manifest


def _slots(status: dict[str, Any]) -> dict[int, str]:
    return {int(i["slot"]): str(i["instanceId"]) for i in status.get("instances") or []}


def test_a_user_data_change_rolls_out_in_batches_do_not_disrupt_last(
    world: OperatorWorld,
) -> None:
    ns = world.namespace()
    world.apply(ns, _manifest(V1))
    first = _slots(world.wait_ready(ns, "train", 4)["status"])
    assert sorted(first) == [0, 1, 2, 3]
    seen = len(world.emulator.admin_ok("GET", "/_emulator/requests")["Requests"])

    world.apply(ns, _manifest(V2))

    def rolled() -> dict[int, str] | None:
        pool = world.get(ns, "train") or {}
        status = pool.get("status") or {}
        now = _slots(status)
        done = (
            len(now) == 4
            and not set(now.values()) & set(first.values())
            and status.get("readyReplicas") == 4
            and status.get("observedGeneration") == pool["metadata"]["generation"]
        )
        return now if done else None

    final = world.wait_until(rolled, "every slot on the new user data", timeout=300)
    uid = pool_uid(world, ns)
    world.wait_until(  # the last batch's old instances terminate as its run ends
        lambda: set(world.cloud(uid)) == set(final.values()), "only the new instances", 120
    )

    calls = world.emulator.admin_ok("GET", "/_emulator/requests")["Requests"][seen:]
    ok = sorted((c for c in calls if c["Code"] == "OK"), key=lambda c: c["Time"])
    created = [_slot_of(c["Params"]) for c in ok if c["Action"] == "RunInstances"]
    assert sorted(created) == [0, 1, 2, 3]  # one new instance per slot, nothing more
    assert created.index(0) >= 2  # the do-not-disrupt slot: in the second (last) batch
    alive = peak = 4
    gone: set[str] = set()
    for call in ok:
        if call["Action"] == "RunInstances":
            alive += 1
        elif call["Action"] == "TerminateInstances":
            ids = set(call["Params"].get("InstanceIds") or []) - gone
            gone |= ids
            alive -= len(ids)
        peak = max(peak, alive)
    assert peak <= 5, peak  # replicas + maxSurge
    assert "rollout batch 2: slots [0, 3] replaced" in world.log.read_text(errors="replace")


def pool_uid(world: OperatorWorld, ns: str) -> str:
    return str((world.get(ns, "train") or {})["metadata"]["uid"])


def _slot_of(params: dict[str, Any]) -> int:
    (spec,) = params["TagSpecification"]
    return int({t["Key"]: t["Value"] for t in spec["Tags"]}["spotpool-slot"])
