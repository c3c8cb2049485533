"""Drift found in a stack's state (engine/state/drift.py): what the refresh read against what the
stack program sets, from the state alone."""

from typing import Any

import pytest

from spotpool.api.notices import NONCE_TAG
from spotpool.api.stackconfig import PoolIdentity, StackConfig
from spotpool.engine.state.drift import drift_in
from spotpool.engine.state.stack_state import SLOT_TYPE
from spotpool.localworld.engine import pool_spec

pytestmark = pytest.mark.unit

POOL = PoolIdentity(namespace="team-a", name="gpu", uid="uid-1")
CONFIG = StackConfig.from_spec(POOL, pool_spec(2, securityGroupIds=["sg-1", "sg-2"]))
URN = (
    "urn:pulumi:team-a.gpu::spotpool::spotpool:index:SpotPool$"
    "tencentcloud:Instance/instance:Instance::gpu-slot-"
)


def _instance(slot: int, suffix: str = "", **outputs: Any) -> dict[str, Any]:
    tags = CONFIG.instance_tags(slot)
    return {
        "urn": f"{URN}{slot}{suffix}",
        "type": SLOT_TYPE,
        "id": f"ins-{slot}{suffix}",
        "inputs": {"hostname": f"gpu-{slot}", "tags": {"__defaults": [], **tags}},
        "outputs": {
            "instanceName": CONFIG.instance_name(slot),
            "orderlySecurityGroups": ["sg-1", "sg-2"],
            "tags": dict(tags),
            "instanceStatus": "RUNNING",
            "runningFlag": True,
            **outputs,
        },
    }


def _state(*instances: dict[str, Any], config: StackConfig | None = CONFIG) -> dict[str, Any]:
    root = {"type": "pulumi:pulumi:Stack", "outputs": {}}
    if config is not None:
        root["outputs"] = {"config": config.redacted().model_dump(mode="json", by_alias=True)}
    return {"resources": [root, *instances]}


def test_what_the_program_set_is_no_drift() -> None:
    assert drift_in(_state(_instance(0), _instance(1))) == []


def test_each_changed_field_is_named_with_what_is_set_and_what_is_found() -> None:
    tags = {**CONFIG.instance_tags(1), "owner": "bob"}
    del tags["spotpool-slot"]
    edited = _instance(
        1, instanceName="by-hand", orderlySecurityGroups=["sg-2", "sg-1"], tags=tags,
        instanceStatus="STOPPED", runningFlag=False,
    )  # fmt: skip
    (drift,) = drift_in(_state(_instance(0), edited))
    assert (drift.slot, drift.instance_id) == (1, "ins-1")
    assert [(f.field, f.desired, f.actual) for f in drift.fields] == [
        ("instanceName", "team-a-gpu-1", "by-hand"),
        ("securityGroups", "sg-1,sg-2", "sg-2,sg-1"),  # their order is the rule order
        ("tags.owner", None, "bob"),
        ("tags.spotpool-slot", "1", None),
        ("running", "RUNNING", "STOPPED"),
    ]


def test_a_stop_still_under_way_is_not_drift_yet() -> None:
    assert drift_in(_state(_instance(0, instanceStatus="STOPPING"))) == []


def test_surges_and_slots_the_next_up_drops_are_left_out() -> None:
    surge = _instance(0, "-surge", instanceName="whatever")
    beyond = _instance(5, instanceName="whatever")
    assert drift_in(_state(_instance(0), surge, beyond)) == []


def test_an_adopted_instance_keeps_its_own_generation_tag() -> None:
    adopted = _instance(0, tags={**CONFIG.instance_tags(0), NONCE_TAG: "old"})
    adopted["inputs"] = {"tags": {**CONFIG.instance_tags(0), NONCE_TAG: "new"}}  # no hostname
    assert drift_in(_state(adopted)) == []


def test_a_state_without_a_config_still_tells_tags_and_stops() -> None:
    edited = _instance(0, instanceName="by-hand", instanceStatus="STOPPED")
    (drift,) = drift_in(_state(edited, config=None))
    assert [f.field for f in drift.fields] == ["running"]
