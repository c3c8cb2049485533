"""Drift with a fake engine: what a full refresh's drift does under each spec.driftPolicy."""

from pathlib import Path
from typing import Any

import pytest

from spotpool.api.drift import FieldDrift, InstanceDrift
from tests.operator.fakes import World, make_world, pool_body, ref, run

pytestmark = pytest.mark.unit

STACK = "team-a.gpu"


def _converged(world: World, **spec: Any) -> None:
    run(world.reconciler.converge(ref(pool_body(**spec))))


def _hand_edit(world: World, slot: int = 1) -> InstanceDrift:
    edited = InstanceDrift(
        slot=slot,
        instance_id=world.cloud.stacks[STACK][slot],
        fields=[
            FieldDrift(field="instanceName", desired="team-a-gpu-1", actual="by-hand"),
            FieldDrift(field="running", desired="RUNNING", actual="STOPPED"),
        ],
    )
    world.cloud.drift[STACK] = [edited]
    return edited


def _drift_condition(world: World) -> dict[str, Any]:
    final = world.cluster.last("team-a/gpu")
    found: list[dict[str, Any]] = [c for c in final["conditions"] if c["type"] == "DriftDetected"]
    return found[0]


def test_a_pool_that_never_drifted_carries_no_drift_condition(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    _converged(world)
    run(world.reconciler.check_reclaims(ref(pool_body())))
    final = world.cluster.last("team-a/gpu")
    assert "DriftDetected" not in [c["type"] for c in final["conditions"]]
    assert not final.get("drift")


def test_correct_reports_the_drift_then_restores_it_with_an_up(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    _converged(world)
    edited = _hand_edit(world)

    run(world.reconciler.check_reclaims(ref(pool_body())))

    assert world.cloud.calls[-2:] == [("refresh", STACK), ("up", STACK)]
    assert world.cloud.drift.get(STACK) is None  # the up restored it
    found = [m for t, r, m in world.events.posted if r == "DriftDetected"]
    assert len(found) == 1 and edited.instance_id in found[0] and "instanceName" in found[0]
    assert "Correct" in found[0]
    written = world.cluster.statuses["team-a/gpu"]
    assert any(
        w.get("drift") and w["drift"][0]["instanceId"] == edited.instance_id for w in written
    )
    condition = _drift_condition(world)
    assert condition["status"] == "False" and condition["reason"] == "Corrected"
    assert not world.cluster.last("team-a/gpu").get("drift")
    corrected = [m for _, r, m in world.events.posted if r == "DriftCorrected"]
    assert corrected and edited.instance_id in corrected[0]


def test_report_leaves_it_and_says_so_once_until_the_policy_changes(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    _converged(world, driftPolicy="Report")
    edited = _hand_edit(world)

    for _ in range(3):
        run(world.reconciler.check_reclaims(ref(pool_body(driftPolicy="Report"))))

    assert [c for c in world.cloud.calls if c[0] == "up"] == [("up", STACK)]  # the first only
    assert world.cloud.drift[STACK] == [edited]
    assert len([r for _, r, _ in world.events.posted if r == "DriftDetected"]) == 1
    condition = _drift_condition(world)
    assert condition["status"] == "True" and condition["reason"] == "ChangedOutsideOperator"
    assert "Report" in str(condition["message"]) and edited.instance_id in str(condition["message"])
    assert world.cluster.last("team-a/gpu")["drift"][0]["slot"] == 1

    # The policy turns to Correct (a new generation, the same stack config): an up restores it.
    run(world.reconciler.converge(ref(pool_body(generation=2, driftPolicy="Correct"))))
    assert world.cloud.calls[-1] == ("up", STACK)
    assert _drift_condition(world)["status"] == "False"


def test_report_replaces_a_reclaimed_slot_without_restoring_the_drifted_one(
    tmp_path: Path,
) -> None:
    world = make_world(tmp_path)
    _converged(world, replicas=3, driftPolicy="Report")
    edited = _hand_edit(world, slot=1)
    body = pool_body(replicas=3, driftPolicy="Report")
    run(world.reconciler.check_reclaims(ref(body)))  # the drift is reported
    world.cloud.reclaim(STACK, 2)

    run(world.reconciler.check_reclaims(ref(body)))

    assert ("replace_slots", STACK) in world.cloud.calls  # a targeted replacement of slot 2
    assert world.cloud.drift[STACK] == [edited]  # slot 1 still as found
    final = world.cluster.last("team-a/gpu")
    assert final["size"] == 3 and final["drift"][0]["slot"] == 1
    assert _drift_condition(world)["status"] == "True"


def test_drift_undone_by_hand_clears_the_condition(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    _converged(world, driftPolicy="Report")
    _hand_edit(world)
    run(world.reconciler.check_reclaims(ref(pool_body(driftPolicy="Report"))))
    world.cloud.drift.pop(STACK)  # set back by hand

    run(world.reconciler.check_reclaims(ref(pool_body(driftPolicy="Report"))))

    condition = _drift_condition(world)
    assert condition["status"] == "False" and condition["reason"] == "NoDrift"
    assert not world.cluster.last("team-a/gpu").get("drift")
