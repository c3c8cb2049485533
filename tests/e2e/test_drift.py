"""Drift end to end: a real kube-apiserver, the operator process, the real Pulumi engine and
tencentcloud provider, the emulator as the cloud. An instance is changed the way a person does
it in the console (the cloud API: ModifyInstancesAttribute, StopInstances); the next full
refresh raises DriftDetected under either spec.driftPolicy; Report leaves the instance as found,
Correct restores it (the same instance, started again)."""

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tencentcloud.cvm.v20170312 import models

from spotpool.localworld.kube import Kube
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
REGION = "ap-singapore"
GROUPS = ["sg-11111111"]


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    # Every timer check is a full Pulumi refresh (the default is every 60th), 10 s apart.
    with operator_world(
        kube, tmp_path_factory.mktemp("drift"), env={"SPOTPOOL_FULL_REFRESH_EVERY": "1"}
    ) as world:
        yield world


def console_edit(world: OperatorWorld, instance_id: str) -> float:
    """Rename the instance, move it to another security group and stop it, through the cloud
    API as the console does; returns when the edit was made (monotonic)."""
    cvm = world.emulator.cvm(region=REGION)
    # One attribute a request, as the API takes them.
    for attribute in ({"InstanceName": "by-hand"}, {"SecurityGroups": ["sg-2"]}):
        modify = models.ModifyInstancesAttributeRequest()
        modify.from_json_string(json.dumps({"InstanceIds": [instance_id], **attribute}))
        cvm.ModifyInstancesAttribute(modify)
    stop = models.StopInstancesRequest()
    stop.from_json_string(json.dumps({"InstanceIds": [instance_id]}))
    cvm.StopInstances(stop)
    return time.monotonic()


def described(world: OperatorWorld, instance_id: str) -> dict[str, Any]:
    (found,) = [i for i in world.emulator.all_instances() if i["InstanceId"] == instance_id]
    return found


def drift_condition(world: OperatorWorld, ns: str, name: str) -> dict[str, Any] | None:
    conditions = world.status(ns, name).get("conditions") or []
    return next((c for c in conditions if c["type"] == "DriftDetected"), None)


def refreshes(world: OperatorWorld) -> float:
    found = re.search(
        r'spotpool_operations_total\{kind="refresh",result="succeeded"\} (\S+)', world.metrics()
    )
    return float(found.group(1)) if found else 0.0


def start_pool(world: OperatorWorld, name: str, policy: str) -> tuple[str, str, str]:
    ns = world.namespace()
    manifest = pool_manifest(
        name, replicas=2, refreshInterval="10s", securityGroupIds=GROUPS, driftPolicy=policy
    )
    world.apply(ns, manifest)
    pool = world.wait_ready(ns, name, 2)
    edited = pool["status"]["instances"][1]["instanceId"]
    return ns, edited, pool["status"]["instances"][0]["instanceId"]


def test_report_leaves_the_instance_as_found_until_the_policy_changes(
    world: OperatorWorld,
) -> None:
    ns, edited, other = start_pool(world, "reported", "Report")
    edited_at = console_edit(world, edited)

    def reported() -> dict[str, Any] | None:
        found = drift_condition(world, ns, "reported")
        return found if found and found["status"] == "True" else None

    condition = world.wait_until(reported, "DriftDetected under Report", timeout=120)
    print(f"\nReport: edit -> DriftDetected in {time.monotonic() - edited_at:.1f} s")
    assert edited in condition["message"] and "instanceName" in condition["message"]
    assert "running" in condition["message"] and "Report" in condition["message"]
    (drift,) = world.status(ns, "reported")["drift"]
    assert drift["instanceId"] == edited and drift["slot"] == 1
    fields = {f["field"]: (f.get("desired"), f.get("actual")) for f in drift["fields"]}
    assert fields["instanceName"] == (f"{ns}-reported-1", "by-hand")
    assert fields["securityGroups"] == ("sg-11111111", "sg-2")
    assert fields["running"] == ("RUNNING", "STOPPED")
    events = world.events(ns, "reported")
    assert [m for t, r, m in events if (t, r) == ("Warning", "DriftDetected") and edited in m]

    # Two more full refreshes: nothing restores it, the condition stays.
    seen = refreshes(world)
    world.wait_until(lambda: refreshes(world) >= seen + 2, "two more full refreshes")
    instance = described(world, edited)
    assert instance["InstanceName"] == "by-hand" and instance["InstanceState"] == "STOPPED"
    assert instance["SecurityGroupIds"] == ["sg-2"]
    assert reported() is not None
    assert described(world, other)["InstanceState"] == "RUNNING"

    # The policy turns to Correct: the up restores the same instance.
    world.kube.ok(
        "-n", ns, "patch", "spotpool/reported", "--type=merge",
        "-p", '{"spec": {"driftPolicy": "Correct"}}',
    )  # fmt: skip
    restored_instance(world, ns, "reported", edited)


def restored_instance(world: OperatorWorld, ns: str, name: str, edited: str) -> None:
    def restored() -> dict[str, Any] | None:
        instance = described(world, edited)
        condition = drift_condition(world, ns, name) or {}
        done = (
            instance["InstanceState"] == "RUNNING"
            and instance["InstanceName"] == f"{ns}-{name}-1"
            and condition.get("status") == "False"
        )
        return instance if done else None

    instance = world.wait_until(restored, "the drifted instance restored", timeout=180)
    assert instance["SecurityGroupIds"] == GROUPS
    status = world.status(ns, name)
    assert edited in [i["instanceId"] for i in status["instances"]]  # restarted, not replaced
    assert status.get("drift") in (None, [])
    assert drift_condition(world, ns, name)["reason"] == "Corrected"  # type: ignore[index]
    assert any(r == "DriftCorrected" and edited in m for _, r, m in world.events(ns, name))


def test_correct_reports_and_restores_the_instance(world: OperatorWorld) -> None:
    ns, edited, _ = start_pool(world, "corrected", "Correct")
    edited_at = console_edit(world, edited)

    def detected() -> dict[str, Any] | None:
        return drift_condition(world, ns, "corrected")

    world.wait_until(detected, "DriftDetected under Correct", timeout=120)
    print(f"\nCorrect: edit -> DriftDetected in {time.monotonic() - edited_at:.1f} s")
    detected_events = [
        m for _, r, m in world.events(ns, "corrected") if r == "DriftDetected" and edited in m
    ]
    assert detected_events and "instanceName" in detected_events[0]
    restored_instance(world, ns, "corrected", edited)
    print(f"Correct: edit -> restored in {time.monotonic() - edited_at:.1f} s")
