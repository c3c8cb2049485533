"""Termination notices in the engine, for real: a surge instance made beside a noticed slot's
instance, promoted into the slot (a Pulumi alias: a rename in the state, no create or delete)
when the cloud takes the old one; the notice agent's part of each slot's user data."""

import base64
import json

import pytest
from tencentcloud.cvm.v20170312 import models

from spotpool.api.notices import NoticeAgent, agent_settings, slot_token
from spotpool.api.stackconfig import StackConfig
from spotpool.engine.stacks.stack import PoolStack
from spotpool.engine.tencent import cloud
from tests.emulator.harness import wait_until
from tests.engine.conftest import REGION, EngineWorld

pytestmark = pytest.mark.integration
AGENT = NoticeAgent(url="http://10.0.0.5:8090", command="spotpool notice-agent")


def _config(world: EngineWorld, stack: PoolStack, replicas: int) -> StackConfig:
    return world.config(stack, replicas).model_copy(update={"notice_agent": AGENT})


def _user_data(world: EngineWorld, instance_id: str) -> str:
    client = cloud.cvm(world.credentials, REGION, world.emulator.endpoint)
    request = models.DescribeInstancesAttributesRequest()
    request.from_json_string(json.dumps({"InstanceIds": [instance_id], "Attributes": ["UserData"]}))
    reply = client.DescribeInstancesAttributes(request)
    return base64.b64decode(reply.InstanceSet[0].Attributes.UserData).decode()


def _state_names(world: EngineWorld, stack: PoolStack) -> dict[str, str]:
    exported = json.loads(world.pulumi(stack, "stack", "export"))
    return {
        r["urn"].rsplit("::", 1)[-1]: r.get("id", "")
        for r in exported["deployment"]["resources"]
        if r["type"].startswith("tencentcloud:")
    }


def test_surge_then_promote_renames_in_state(world: EngineWorld) -> None:
    stack = world.pool()
    config = _config(world, stack, 2)
    first = {i.slot: i.instance_id for i in stack.up(config).instances}

    # Each slot's user data installs the agent with that slot's own token.
    for slot, instance_id in first.items():
        settings = agent_settings(_user_data(world, instance_id))
        assert settings["SPOTPOOL_NOTICE_SLOT"] == str(slot)
        assert settings["SPOTPOOL_NOTICE_POOL"] == stack.pool.uid
        assert settings["SPOTPOOL_NOTICE_URL"] == AGENT.url
        key = world.settings.notice_key(stack.pool.uid)
        nonce = settings["SPOTPOOL_NOTICE_NONCE"]  # its generation: the token is bound to it
        assert settings["SPOTPOOL_NOTICE_TOKEN"] == slot_token(key, slot, nonce)
    shown = world.pulumi(stack, "config") + world.pulumi(stack, "stack", "export")
    assert world.settings.notice_key(stack.pool.uid) not in shown  # a secret: never plain

    surged = stack.start_surge(config, [0])
    assert {i.slot: i.instance_id for i in surged.instances} == first
    (surge,) = surged.surges
    assert surge.slot == 0 and surge.instance_id not in first.values()
    assert surged.changes.create == 1
    assert set(world.cloud_instances(stack)) == {*first.values(), surge.instance_id}
    # the surge instance carries the slot's token: it may become the slot's instance
    assert agent_settings(_user_data(world, surge.instance_id))["SPOTPOOL_NOTICE_SLOT"] == "0"

    # A full up in between keeps the surge instance beside its slot's.
    again = stack.up(config)
    assert [s.instance_id for s in again.surges] == [surge.instance_id]
    assert again.changes.create == again.changes.delete == 0

    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [first[0]]})
    wait_until(lambda: first[0] not in world.cloud_instances(stack), "the reclaim", timeout=30)
    promoted = stack.replace_slots(config, [0])
    assert {i.slot: i.instance_id for i in promoted.instances} == {
        0: surge.instance_id,
        1: first[1],
    }
    assert promoted.surges == []
    assert promoted.changes.create == promoted.changes.delete == 0
    names = _state_names(world, stack)
    assert names == {"gpu-slot-0": surge.instance_id, "gpu-slot-1": first[1]}
    assert set(world.cloud_instances(stack)) == {surge.instance_id, first[1]}

    # The promoted instance is the slot's now: an up changes nothing.
    settled = stack.up(config)
    assert settled.changes.create == settled.changes.delete == settled.changes.replace == 0
    assert settled.changes.update == 0


def test_full_up_promotes_a_surge_whose_slot_left_the_state(world: EngineWorld) -> None:
    """The timer's path: a refresh dropped the taken instance; the next up promotes."""
    stack = world.pool()
    config = _config(world, stack, 1)
    first = stack.up(config).instances[0].instance_id
    (surge,) = stack.start_surge(config, [0]).surges
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [first]})
    wait_until(lambda: first not in world.cloud_instances(stack), "the reclaim", timeout=30)
    refreshed = stack.refresh()
    assert refreshed.gone_slots == [0]
    result = stack.up(config)
    assert [i.instance_id for i in result.instances] == [surge.instance_id]
    assert result.changes.create == 0
    assert _state_names(world, stack) == {"gpu-slot-0": surge.instance_id}


def test_surge_keeps_its_slots_placement_whatever_the_new_plan(world: EngineWorld) -> None:
    """Placement may send a gone slot elsewhere; a surge instance is made, and promoted, with
    its slot's own zone, or the promotion would replace it."""
    stack = world.pool()
    base = _config(world, stack, 1)
    placed = base.model_copy(update={"slot_zones": {0: "ap-singapore-3"}})
    first = stack.up(placed).instances[0]
    assert first.zone == "ap-singapore-3"
    (surge,) = stack.start_surge(base, [0]).surges  # the operator's plain config
    assert surge.zone == "ap-singapore-3"
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [first.instance_id]})
    wait_until(lambda: first.instance_id not in world.cloud_instances(stack), "reclaim", 30)
    elsewhere = base.model_copy(update={"slot_zones": {0: "ap-singapore-2"}})
    promoted = stack.replace_slots(elsewhere, [0])
    assert [(i.instance_id, i.zone) for i in promoted.instances] == [
        (surge.instance_id, "ap-singapore-3")
    ]
    assert promoted.changes.create == promoted.changes.replace == 0


def test_a_surge_whose_slot_outlived_its_notice_is_retired(world: EngineWorld) -> None:
    stack = world.pool()
    config = _config(world, stack, 2)
    first = {i.slot: i.instance_id for i in stack.up(config).instances}
    surges = {s.slot: s.instance_id for s in stack.start_surge(config, [0, 1]).surges}
    retired = stack.retire_surges(config, [0])
    assert {i.slot: i.instance_id for i in retired.instances} == first
    assert {s.slot: s.instance_id for s in retired.surges} == {1: surges[1]}
    assert retired.changes.delete == 1 and retired.changes.create == 0
    live = world.cloud_instances(stack)
    assert live.get(surges[0], "gone") in ("TERMINATING", "gone")
    assert set(_state_names(world, stack)) == {"gpu-slot-0", "gpu-slot-1", "gpu-slot-1-surge"}


def test_one_run_promotes_a_surge_and_replaces_another_gone_slot(world: EngineWorld) -> None:
    stack = world.pool()
    config = _config(world, stack, 2)
    first = {i.slot: i.instance_id for i in stack.up(config).instances}
    (surge,) = stack.start_surge(config, [0]).surges
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": list(first.values())})
    wait_until(lambda: not set(first.values()) & set(world.cloud_instances(stack)), "reclaims", 30)
    result = stack.replace_slots(config, [0, 1])
    now = {i.slot: i.instance_id for i in result.instances}
    assert now[0] == surge.instance_id and now[1] not in first.values()
    assert result.changes.create == 1 and result.surges == []
    assert set(world.cloud_instances(stack)) == set(now.values())


def test_after_a_restart_the_full_up_promotes_the_surge(world: EngineWorld) -> None:
    """A new process knows nothing of the stack: replace_slots falls back to an up with a
    refresh, which must promote the surge instance, not create a third beside it."""
    from spotpool.engine.runs import known_stacks

    stack = world.pool()
    config = _config(world, stack, 1)
    first = stack.up(config).instances[0].instance_id
    (surge,) = stack.start_surge(config, [0]).surges
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [first]})
    wait_until(lambda: first not in world.cloud_instances(stack), "the reclaim", timeout=30)
    known_stacks._known_stacks.clear()  # as a restarted operator
    result = PoolStack(stack.pool, world.settings, world.credentials, REGION).replace_slots(
        config, [0]
    )
    assert [i.instance_id for i in result.instances] == [surge.instance_id]
    assert result.changes.create == 0 and result.surges == []
    assert set(world.cloud_instances(stack)) == {surge.instance_id}
