"""Launch intents as one object per slot launch (launch_intents.py), on a file:// backend: what
a late writer can and cannot do, and an intent stored whole by an earlier release."""

import json
import time
import uuid
from pathlib import Path

import pytest
from pydantic import SecretStr

from spotpool.api.spec import ChargeType
from spotpool.api.stackconfig import PoolIdentity
from spotpool.engine.basics.settings import EngineSettings
from spotpool.engine.launches import launch_intents
from spotpool.engine.launches.launch_intents import LaunchIntent, SlotLaunch
from spotpool.engine.stacks.stack import PoolStack
from spotpool.engine.tencent.credentials import Credentials

pytestmark = pytest.mark.unit


def _stack(tmp_path: Path, name: str = "gpu") -> PoolStack:
    (tmp_path / "backend").mkdir(exist_ok=True)
    settings = EngineSettings(
        backend_url=f"file://{tmp_path / 'backend'}",
        passphrase=SecretStr("p"),
        work_root=tmp_path / "work",
        orphan_min_age=900.0,
    )
    credentials = Credentials(secret_id=SecretStr("AKID"), secret_key=SecretStr("k"))
    identity = PoolIdentity(namespace="team-a", name=name, uid=str(uuid.uuid4()))
    return PoolStack(identity, settings, credentials, "ap-guangzhou")


def _launch(generation: str, instance_id: str | None = None, age: float = 0.0) -> SlotLaunch:
    return SlotLaunch(
        client_token=f"spotpool-{generation}",
        generation=generation,
        zone="ap-guangzhou-3",
        instance_type="GN7.2XLARGE32",
        charge_type=ChargeType.SPOTPAID,
        instance_id=instance_id,
        launched=time.time() - age,
    )


def test_an_answer_is_not_written_back_for_a_launch_the_next_holder_removed(
    tmp_path: Path,
) -> None:
    stack = _stack(tmp_path)
    launch = _launch("aa01")
    launch_intents.add_launch(stack, 0, launch)
    launch_intents.forget(stack)  # the pool went: the next holder removed its intents
    launch.instance_id = "ins-late"
    assert not launch_intents.record_instance(stack, 0, launch)
    assert launch_intents.read_intent(stack).slots == {}


def test_of_two_launches_for_a_slot_the_answered_one_counts_and_both_settle(
    tmp_path: Path,
) -> None:
    stack = _stack(tmp_path)
    launch_intents.add_launch(stack, 1, _launch("bb01", "ins-answered", age=5))
    launch_intents.add_launch(stack, 1, _launch("bb02"))  # a stalled writer's, never sent
    intent = launch_intents.read_intent(stack)
    assert intent.slots[1].instance_id == "ins-answered"
    launch_intents.settle(stack, intent, {1: "ins-answered"})  # adopted
    assert launch_intents.read_intent(stack).slots == {}
    assert launch_intents.pending_stacks(stack.settings.backend_url) == []


def test_an_intent_stored_whole_is_read_and_moved_into_objects(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    whole = LaunchIntent(
        pool_uid=stack.pool.uid,
        slots={0: _launch("cc01", "ins-kept"), 1: _launch("cc02", "ins-adopted")},
    )
    path = tmp_path / "backend" / launch_intents.intent_key(stack.name)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(whole.model_dump(mode="json")))
    assert launch_intents.pending_stacks(stack.settings.backend_url) == [stack.name]

    intent = launch_intents.read_intent(stack)
    assert set(intent.slots) == {0, 1}
    # slot 0 still holds the reclaimed instance (not gone from the state yet): kept
    launch_intents.settle(stack, intent, {0: "ins-reclaimed", 1: "ins-adopted"})

    assert not path.exists()
    left = launch_intents.read_intent(stack)
    assert {s: v.instance_id for s, v in left.slots.items()} == {0: "ins-kept"}


def test_pending_stacks_names_each_stack_once_and_no_namesake(tmp_path: Path) -> None:
    one, other = _stack(tmp_path, "gpu"), _stack(tmp_path, "gpu-2")
    launch_intents.add_launch(one, 0, _launch("dd01"))
    launch_intents.add_launch(one, 1, _launch("dd02"))
    launch_intents.add_launch(other, 0, _launch("dd03"))
    assert launch_intents.pending_stacks(one.settings.backend_url) == sorted([one.name, other.name])
    assert set(launch_intents.read_intent(one).slots) == {0, 1}
    assert set(launch_intents.read_intent(other).slots) == {0}
    launch_intents.PENDING.clear()
    launch_intents.forget(one)
    assert not launch_intents.has_pending(one) and launch_intents.has_pending(other)
