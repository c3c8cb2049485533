"""The storm fast path for real: a slot's replacement launched through the cloud API (official
SDK) with the request the tencentcloud provider sends for that slot, then adopted into the slot
by the stack's next `up` (real Pulumi, real provider, the emulator as the cloud), after which
a plain `pulumi preview` shows no change."""

import base64
import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from spotpool.api.notices import NONCE_TAG, slot_token
from spotpool.api.spec import ChargeType
from spotpool.engine.basics.errors import EngineError
from spotpool.engine.fencing.ownership import Writer
from spotpool.engine.launches import fast_launch, launch_intents
from spotpool.engine.stacks.stack import PoolStack, forget_stack
from spotpool.engine.state.backend_files import open_backend
from spotpool.engine.tencent import write_safety
from spotpool.localworld.emulator import wait_until
from tests.engine._support.fast_launch import (
    PASSWORD,
    pool_instances,
    pool_stack,
    preview_expecting_no_changes,
    storm_config,
    up_and_reclaim,
)
from tests.engine.conftest import REGION, EngineWorld

pytestmark = pytest.mark.integration
ROOT = Path(__file__).parents[2]


def _run_requests(world: EngineWorld) -> list[dict[str, Any]]:
    calls = world.emulator.admin_ok("GET", "/_emulator/requests?action=RunInstances")["Requests"]
    return [c["Params"] for c in calls if c["Code"] == "OK"]


def _tags(params: dict[str, Any]) -> dict[str, str]:
    (spec,) = params["TagSpecification"]
    return {t["Key"]: t["Value"] for t in spec["Tags"]}


def _slot_of(params: dict[str, Any]) -> int:
    return int(_tags(params)["spotpool-slot"])


def _normalized(params: dict[str, Any]) -> dict[str, Any]:
    """The request with order made irrelevant (tags sorted) and what differs by design left
    out: `ClientToken` (each its own: the fast path's, the proxy's for the provider), and the
    generation of the instance — the `spotpool-notice-nonce` tag's value and, in the user
    data, the agent's `SPOTPOOL_NOTICE_NONCE` and `SPOTPOOL_NOTICE_TOKEN` lines (a fresh nonce
    per create)."""
    body = {k: v for k, v in params.items() if k != "ClientToken"}
    tags = _tags(params)
    tags.pop(NONCE_TAG, None)
    body["TagSpecification"] = [{"ResourceType": "instance", "Tags": sorted(tags.items())}]
    if "UserData" in params:
        text = base64.b64decode(params["UserData"]).decode()
        body["UserData"] = re.sub(r"(SPOTPOOL_NOTICE_(?:NONCE|TOKEN))=\S+", r"\1=*", text)
    return body


def _user_data_settings(params: dict[str, Any]) -> dict[str, str]:
    text = base64.b64decode(params["UserData"]).decode()
    return dict(re.findall(r"(SPOTPOOL_NOTICE_[A-Z]+)=(\S+)", text))


def test_fast_path_sends_the_providers_request_and_up_adopts_it_with_no_change(
    world: EngineWorld, tmp_path: Path
) -> None:
    stack = pool_stack(world)
    config = storm_config(world, stack, 2)
    first = {i.slot: i.instance_id for i in stack.up(config, login_password=PASSWORD).instances}
    by_provider = {_slot_of(p): p for p in _run_requests(world)}
    assert sorted(by_provider) == [0, 1]

    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [first[1]]})
    wait_until(lambda: first[1] not in pool_instances(world, stack), "the reclaim", timeout=30)
    launched = fast_launch.launch_replacements(stack, config, [1], login_password=PASSWORD)

    assert launched.failed == {} and list(launched.instances) == [1]
    fast_id = launched.instances[1]
    assert fast_id not in first.values() and fast_id in pool_instances(world, stack)
    *_, ours = _run_requests(world)
    # (a) the very request the provider sends for slot 1, but for the generation
    assert NONCE_TAG in _tags(ours) and NONCE_TAG in _tags(by_provider[1])
    assert _normalized(ours) == _normalized(by_provider[1])
    # The provider sends none: the API proxy gave its create one of the run's own.
    assert by_provider[1]["ClientToken"].startswith(write_safety.TOKEN_PREFIX)
    assert ours["ClientToken"] and not ours["ClientToken"].startswith(write_safety.TOKEN_PREFIX)
    nonce = _tags(ours)[NONCE_TAG]
    assert nonce != _tags(by_provider[1])[NONCE_TAG]
    agent = _user_data_settings(ours)
    assert agent["SPOTPOOL_NOTICE_NONCE"] == nonce
    key = world.settings.notice_key(stack.pool.uid)
    assert agent["SPOTPOOL_NOTICE_TOKEN"] == slot_token(key, 1, nonce)
    # The intent beside the stack's files, before any up: no secret in it.
    files = open_backend(world.settings.backend_url)
    assert files is not None
    (key,) = files.keys(launch_intents.intent_key(stack.name))  # one object per slot launch
    raw = files.read(key).decode()
    intent = json.loads(raw)
    assert intent["slot"] == 1 and intent["pool_uid"] == stack.pool.uid
    assert intent["instance_id"] == fast_id
    assert intent["client_token"] == ours["ClientToken"]
    assert PASSWORD not in raw and key not in raw and agent["SPOTPOOL_NOTICE_TOKEN"] not in raw

    served = len(_run_requests(world))
    adopted = stack.up(config, login_password=PASSWORD, refresh=True)

    # (b) the slot holds the fast-path instance; nothing was created, nothing replaced
    assert {i.slot: i.instance_id for i in adopted.instances} == {0: first[0], 1: fast_id}
    assert adopted.changes.create == 0 and adopted.changes.delete == 0
    assert len(_run_requests(world)) == served
    # adopted as planned: the caller says it once (Replaced); no recovery note
    assert not any(fast_id in note for note in adopted.recovered), adopted.recovered
    assert next(i for i in adopted.instances if i.slot == 1).nonce == nonce
    assert sorted(pool_instances(world, stack)) == sorted([first[0], fast_id])
    assert launch_intents.read_intent(stack).slots == {}  # settled
    assert stack.name not in launch_intents.PENDING
    shown = preview_expecting_no_changes(world, stack, tmp_path)
    assert "4 unchanged" in shown, shown
    again = stack.up(config, login_password=PASSWORD)
    changed = again.changes.model_dump(exclude={"same"})
    assert not any(changed.values()) and not again.recovered, (changed, again.recovered)


def test_a_retry_or_a_restart_with_the_same_intent_launches_nothing_new(
    world: EngineWorld,
) -> None:
    stack = pool_stack(world)
    config = storm_config(world, stack, 2)
    first = up_and_reclaim(world, stack, config, 0)

    once = fast_launch.launch_replacements(stack, config, [0], login_password=PASSWORD)
    twice = fast_launch.launch_replacements(stack, config, [0], login_password=PASSWORD)
    # A restart: a new process knows nothing of the stack but what the backend holds.
    forget_stack(stack.name)
    launch_intents.PENDING.clear()
    assert launch_intents.pending_stacks(world.settings.backend_url) == [stack.name]
    restarted = PoolStack(stack.pool, stack.settings, world.credentials, REGION)
    thrice = fast_launch.launch_replacements(restarted, config, [0], login_password=PASSWORD)

    assert once.instances == twice.instances == thrice.instances
    (fast_id,) = once.instances.values()
    # (c) three calls, one ClientToken, one instance
    fast_calls = [
        p
        for p in _run_requests(world)
        if not p["ClientToken"].startswith(write_safety.TOKEN_PREFIX)  # the provider's: proxy's
    ]
    assert len(fast_calls) == 3 and len({p["ClientToken"] for p in fast_calls}) == 1
    assert sorted(pool_instances(world, stack)) == sorted([fast_id, first[1]])

    adopted = restarted.up(config, login_password=PASSWORD, refresh=True)
    assert {i.slot: i.instance_id for i in adopted.instances} == {0: fast_id, 1: first[1]}
    assert adopted.changes.create == 0


def test_a_kill_between_launch_and_its_reply_still_leaves_one_instance_per_slot(
    world: EngineWorld,
) -> None:
    """The intent is written before RunInstances is sent: a writer killed before the reply
    leaves the slot's ClientToken but no instance id. The next writer's `up` adopts the
    instance by its tags (the slot a dead launch was filling), never makes a second."""
    stack = pool_stack(world)
    config = storm_config(world, stack, 2)
    first = up_and_reclaim(world, stack, config, 1)
    (fast_id,) = fast_launch.launch_replacements(stack, config, [1], PASSWORD).instances.values()
    intent = launch_intents.read_intent(stack)
    intent.slots[1].instance_id = None  # as if killed before the cloud's reply arrived
    launch_intents.write_intent(stack, intent)
    forget_stack(stack.name)
    launch_intents.PENDING.clear()

    successor = PoolStack(stack.pool, stack.settings, world.credentials, REGION)
    adopted = successor.up(config, login_password=PASSWORD, refresh=True)

    assert {i.slot: i.instance_id for i in adopted.instances} == {0: first[0], 1: fast_id}
    assert adopted.changes.create == 0
    assert sorted(pool_instances(world, stack)) == sorted([first[0], fast_id])
    assert launch_intents.read_intent(successor).slots == {}


def test_a_storm_within_the_clouds_request_limits_launches_every_slot_once(
    world: EngineWorld,
) -> None:
    """Twelve slots at once against an emulator enforcing Tencent's limits (RunInstances
    10/s): the shared token bucket paces the calls to the limit (arrival jitter may still get
    one refused at its edge: it is sent again, same ClientToken), every slot gets exactly one
    instance, and the first `up` of the new stack adopts all twelve (no create)."""
    world.emulator.admin_ok("POST", "/_emulator/rate-limits", {"Enabled": True})
    stack = pool_stack(world, "storm")
    config = storm_config(world, stack, 12)

    launched = fast_launch.launch_replacements(stack, config, range(12), PASSWORD)

    assert launched.failed == {} and sorted(launched.instances) == list(range(12))
    calls = world.emulator.admin_ok("GET", "/_emulator/requests?action=RunInstances")["Requests"]
    codes = [c["Code"] for c in calls]
    assert codes.count("OK") == 12 and set(codes) <= {"OK", "RequestLimitExceeded"}
    assert len(codes) <= 14, codes  # paced: at most a refusal or two at the limit's edge
    assert len({c["Params"]["ClientToken"] for c in calls}) == 12
    assert sorted(pool_instances(world, stack)) == sorted(launched.instances.values())
    adopted = stack.up(config, login_password=PASSWORD)
    assert {i.slot: i.instance_id for i in adopted.instances} == launched.instances
    after = world.emulator.admin_ok("GET", "/_emulator/requests?action=RunInstances")["Requests"]
    assert len(after) == len(calls)  # imported, not created (only the stack and component are)
    refused = world.emulator.admin_ok("GET", "/_emulator/rate-limits")["Refused"]
    assert refused == len(codes) - 12  # the up's own calls, paced, were never refused


def test_destroy_terminates_a_fast_path_instance_not_adopted_yet(world: EngineWorld) -> None:
    stack = pool_stack(world)
    config = storm_config(world, stack, 2)
    up_and_reclaim(world, stack, config, 1)
    (fast_id,) = fast_launch.launch_replacements(stack, config, [1], PASSWORD).instances.values()

    stack.refresh()  # the reclaimed instance leaves the state (a destroy would not find it)
    stack.destroy()  # young, yet named by the intent: not another writer's create

    wait_until(lambda: not pool_instances(world, stack), "every instance gone", timeout=30)
    gone = {i["InstanceId"]: i.get("GoneReason") for i in world.emulator.all_instances()}
    assert gone[fast_id] == "terminated"
    files = open_backend(world.settings.backend_url)
    assert files is not None and not files.keys(launch_intents.intent_key(stack.name))


def test_keys_vpc_on_demand_no_agent_and_a_slot_still_held(world: EngineWorld) -> None:
    """The other inputs' shapes: SSH key ids instead of a password, a VPC and subnets of its
    own (one per zone), no public bandwidth and no public IP, no user data and no agent (so no
    nonce), and a spot pool's slot fallen back to on-demand (no market options). The fast path
    launched while the slot's instance still runs (a notice, say) is left alone by the up —
    neither adopted nor terminated: the slot keeps one instance."""
    stack = pool_stack(world, "plain")
    config = world.config(
        stack,
        2,
        vpcId="vpc-abc12345",
        subnetIds={"ap-singapore-2": "subnet-abc12345", "ap-singapore-3": "subnet-def12345"},
        loginSettings={"keyIds": ["skey-abc123"]},
        internetAccessible={"maxBandwidthOut": 0, "publicIpAssigned": False},
    )
    on_demand = (config.zone_of(1), config.type_of(1), ChargeType.POSTPAID_BY_HOUR)
    config = config.placing({1: on_demand})
    first = {i.slot: i.instance_id for i in stack.up(config).instances}
    by_provider = {_slot_of(p): p for p in _run_requests(world)}

    launched = fast_launch.launch_replacements(stack, config, [0, 1])

    ours = {_slot_of(p): p for p in _run_requests(world) if "ClientToken" in p}
    for slot in (0, 1):
        assert _normalized(ours[slot]) == _normalized(by_provider[slot])
    assert "InstanceMarketOptions" not in ours[1] and "InstanceMarketOptions" in ours[0]
    vpc = {"VpcId": "vpc-abc12345", "SubnetId": "subnet-abc12345"}
    assert ours[0]["VirtualPrivateCloud"] == vpc
    assert "UserData" not in ours[0] and NONCE_TAG not in _tags(ours[0])
    assert ours[0]["LoginSettings"] == {"KeyIds": ["skey-abc123"], "KeepImageLogin": "FALSE"}

    again = stack.up(config, refresh=True)
    assert {i.slot: i.instance_id for i in again.instances} == first
    assert set(launched.instances.values()) <= set(pool_instances(world, stack))  # kept
    assert launch_intents.read_intent(stack).slots.keys() == {0, 1}  # until they are old


def test_the_intent_lives_in_an_s3_backend_beside_the_stack(s3_world: EngineWorld) -> None:
    """On a shared S3 backend (versitygw) as on a directory: the intent is an object beside
    the stack's checkpoint, read back by a restarted writer, adopted and removed by its up."""
    world = s3_world
    stack = pool_stack(world)
    config = storm_config(world, stack, 2)
    first = up_and_reclaim(world, stack, config, 0)
    (fast_id,) = fast_launch.launch_replacements(stack, config, [0], PASSWORD).instances.values()
    files = open_backend(world.settings.backend_url)
    assert files is not None
    launched = launch_intents.read_intent(stack).slots[0]
    assert files.keys(launch_intents.intent_key(stack.name)) == [
        launch_intents.slot_key(stack.name, 0, launched)
    ]
    forget_stack(stack.name)
    launch_intents.PENDING.clear()

    successor = PoolStack(stack.pool, stack.settings, world.credentials, REGION)
    adopted = successor.up(config, login_password=PASSWORD, refresh=True)

    assert {i.slot: i.instance_id for i in adopted.instances} == {0: fast_id, 1: first[1]}
    assert adopted.changes.create == 0
    assert not files.keys(launch_intents.intent_key(stack.name))
    assert launch_intents.pending_stacks(world.settings.backend_url) == []


class _LostLease:
    def held(self) -> bool:
        return False

    def acquired_at(self) -> datetime:
        return datetime.now(UTC)

    def earlier_holders(self) -> frozenset[str]:
        return frozenset()


def test_a_writer_that_lost_the_pools_lease_launches_nothing(world: EngineWorld) -> None:
    stack = pool_stack(world)
    config = storm_config(world, stack, 2)
    lost = Writer(hostname="operator-0", pid=os.getpid(), lease=_LostLease())
    settings = stack.settings.model_copy(update={"writer": lost})
    fenced = PoolStack(stack.pool, settings, world.credentials, REGION)

    with pytest.raises(EngineError, match="lost the pool's Lease"):
        fast_launch.launch_replacements(fenced, config, [0, 1], PASSWORD)

    assert _run_requests(world) == [] and not pool_instances(world, stack)
    assert launch_intents.read_intent(stack).slots == {}


def test_the_complete_launch_spec_is_sent_as_the_provider_sends_it(world: EngineWorld) -> None:
    """Per-zone subnets, data disks, a CAM role, a placement group and an image per instance
    type: the fast path's request for each slot equals the provider's, and the up adopts."""
    stack = pool_stack(world, "spec")
    config = world.config(
        stack,
        2,
        vpcId="vpc-gpu1",
        subnetIds={"ap-singapore-2": "subnet-gpu2", "ap-singapore-3": "subnet-gpu3"},
        dataDisks=[{"type": "CLOUD_SSD", "size": 200, "deleteWithInstance": False}, {"size": 50}],
        camRoleName="gpu-trainer",
        placementGroupId="ps-gpu1",
        imageIds={"GN7.2XLARGE32": "img-22trbn9x"},
    )
    first = {i.slot: i.instance_id for i in stack.up(config).instances}
    by_provider = {_slot_of(p): p for p in _run_requests(world)}
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": list(first.values())})
    wait_until(lambda: not pool_instances(world, stack), "the reclaims", timeout=30)

    launched = fast_launch.launch_replacements(stack, config, [0, 1])

    assert launched.failed == {} and sorted(launched.instances) == [0, 1]
    ours = {_slot_of(p): p for p in _run_requests(world) if "ClientToken" in p}
    for slot, subnet in ((0, "subnet-gpu2"), (1, "subnet-gpu3")):
        assert _normalized(ours[slot]) == _normalized(by_provider[slot])
        assert ours[slot]["VirtualPrivateCloud"] == {"VpcId": "vpc-gpu1", "SubnetId": subnet}
        assert ours[slot]["ImageId"] == "img-22trbn9x"
        assert ours[slot]["CamRoleName"] == "gpu-trainer"
        assert ours[slot]["DisasterRecoverGroupIds"] == ["ps-gpu1"]
        assert [d["DiskSize"] for d in ours[slot]["DataDisks"]] == [200, 50]
    adopted = stack.up(config, refresh=True)
    assert {i.slot: i.instance_id for i in adopted.instances} == launched.instances
    assert adopted.changes.create == 0 and adopted.changes.replace == 0
