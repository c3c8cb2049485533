"""Surges bounded in the engine, for real (pinned Pulumi CLI, tencentcloud plugin, emulator):
a surge with no slot to surge beside runs no Pulumi at all (issue 20, item 6), and each
instance's notice token is bound to its own generation, so the token an earlier instance of a
slot held is worthless for the next (item 5)."""

import base64
import json

import pytest
from tencentcloud.cvm.v20170312 import models

from spotpool.api.notices import NONCE_TAG, NoticeAgent, agent_settings, slot_token
from spotpool.api.spec import ChargeType
from spotpool.api.stackconfig import StackConfig
from spotpool.engine.runs import known_stacks
from spotpool.engine.stacks.stack import PoolStack
from spotpool.engine.tencent import cloud
from tests.emulator.harness import wait_until
from tests.engine.conftest import REGION, EngineWorld

pytestmark = pytest.mark.integration
AGENT = NoticeAgent(url="http://10.0.0.5:8090", command="spotpool notice-agent")


def _config(world: EngineWorld, stack: PoolStack, replicas: int) -> StackConfig:
    return world.config(stack, replicas).model_copy(update={"notice_agent": AGENT})


def _agent(world: EngineWorld, instance_id: str) -> dict[str, str]:
    """What anyone who may read instance attributes reads: the agent's settings, token too."""
    client = cloud.cvm(world.credentials, REGION, world.emulator.endpoint)
    request = models.DescribeInstancesAttributesRequest()
    request.from_json_string(json.dumps({"InstanceIds": [instance_id], "Attributes": ["UserData"]}))
    reply = client.DescribeInstancesAttributes(request)
    return agent_settings(base64.b64decode(reply.InstanceSet[0].Attributes.UserData).decode())


def _history(world: EngineWorld, stack: PoolStack) -> int:
    return len(json.loads(world.pulumi(stack, "stack", "history", "--json")))


def _charges(world: EngineWorld, stack: PoolStack) -> dict[str, str]:
    return {
        item["InstanceId"]: item["InstanceChargeType"]
        for item in world.emulator.all_instances()
        if not item.get("Gone")
        and {"Key": "spotpool-pool-uid", "Value": stack.pool.uid} in (item.get("Tags") or [])
    }


def test_a_surge_with_no_eligible_slot_runs_no_pulumi(world: EngineWorld) -> None:
    """Slot 1 fell back to on-demand; a notice's slot has no instance in the state (here: one
    the pool does not have). Before, start_surge ran an untargeted `up` with the spec's plain
    config, which put slot 1 back on spot: a replacement of a running instance."""
    stack = world.pool()
    spec_config = _config(world, stack, 2)
    placed = spec_config.model_copy(update={"slot_charges": {1: ChargeType.POSTPAID_BY_HOUR}})
    first = {i.slot: i.instance_id for i in stack.up(placed).instances}
    before = _charges(world, stack)
    assert before[first[1]] == "POSTPAID_BY_HOUR"
    runs = _history(world, stack)

    for fresh_process in (False, True):  # what this process knows, and a restarted one
        if fresh_process:
            known_stacks._known_stacks.clear()
            stack = PoolStack(stack.pool, world.settings, world.credentials, REGION)
        result = stack.start_surge(spec_config, [2, 5])
        assert result.surges == [] and result.instances == []
        assert result.changes.create == result.changes.delete == result.changes.replace == 0
    assert _history(world, stack) == runs  # no `pulumi up` at all
    assert _charges(world, stack) == before  # slot 1 still runs, still on-demand

    # A surge that has a slot runs targeted, with the placed, carried-over config: the next
    # plain up keeps slot 1 where it is.
    (surge,) = stack.start_surge(spec_config, [0]).surges
    again = stack.up(spec_config)
    assert {i.slot: i.instance_id for i in again.instances} == first
    assert again.changes.create == again.changes.delete == again.changes.replace == 0
    assert _charges(world, stack) == {**before, surge.instance_id: "SPOTPAID"}


def test_an_earlier_instances_token_is_worthless_for_the_next(world: EngineWorld) -> None:
    stack = world.pool()
    config = _config(world, stack, 2)
    key = world.settings.notice_key(stack.pool.uid)
    first = {i.slot: i for i in stack.up(config).instances}
    old = {slot: _agent(world, i.instance_id) for slot, i in first.items()}
    for slot, item in first.items():
        nonce = old[slot]["SPOTPOOL_NOTICE_NONCE"]
        assert item.nonce == nonce  # what the status lists
        assert old[slot]["SPOTPOOL_NOTICE_TOKEN"] == slot_token(key, slot, nonce)
    assert old[0]["SPOTPOOL_NOTICE_NONCE"] != old[1]["SPOTPOOL_NOTICE_NONCE"]

    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [first[0].instance_id]})
    wait_until(lambda: first[0].instance_id not in world.cloud_instances(stack), "reclaim", 30)
    after = {i.slot: i for i in stack.replace_slots(config, [0]).instances}
    assert after[0].instance_id != first[0].instance_id
    assert after[1].instance_id == first[1].instance_id and after[1].nonce == first[1].nonce
    new = _agent(world, after[0].instance_id)
    assert new["SPOTPOOL_NOTICE_NONCE"] == after[0].nonce != first[0].nonce
    assert new["SPOTPOOL_NOTICE_TOKEN"] != old[0]["SPOTPOOL_NOTICE_TOKEN"]
    assert new["SPOTPOOL_NOTICE_TOKEN"] == slot_token(key, 0, new["SPOTPOOL_NOTICE_NONCE"])

    # Generations are stable: an up and a refresh change nothing and list the same nonces.
    settled = stack.up(config)
    assert settled.changes.create == settled.changes.replace == settled.changes.update == 0
    assert {i.slot: i.nonce for i in settled.instances} == {s: i.nonce for s, i in after.items()}
    refreshed = stack.refresh()
    assert {i.slot: i.nonce for i in refreshed.instances} == {s: i.nonce for s, i in after.items()}
    tags = {
        item["InstanceId"]: {t["Key"]: t["Value"] for t in item.get("Tags") or []}
        for item in world.emulator.all_instances()
    }
    assert tags[after[0].instance_id][NONCE_TAG] == after[0].nonce


def test_an_up_with_a_refresh_makes_a_gone_slots_next_instance_a_new_generation(
    world: EngineWorld,
) -> None:
    """The path of a pool found short (a restart, a replacement cut short): `up --refresh`. The
    refresh runs first, so the slot it drops is created anew with a nonce of its own."""
    stack = world.pool()
    config = _config(world, stack, 2)
    first = {i.slot: i for i in stack.up(config).instances}
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [first[1].instance_id]})
    wait_until(lambda: first[1].instance_id not in world.cloud_instances(stack), "reclaim", 30)
    known_stacks._known_stacks.clear()  # as a restarted operator
    again = PoolStack(stack.pool, world.settings, world.credentials, REGION)
    after = {i.slot: i for i in again.up(config, refresh=True).instances}
    assert after[0].instance_id == first[0].instance_id and after[0].nonce == first[0].nonce
    assert after[1].instance_id != first[1].instance_id
    assert after[1].nonce and after[1].nonce != first[1].nonce
    assert _agent(world, after[1].instance_id)["SPOTPOOL_NOTICE_NONCE"] == after[1].nonce
