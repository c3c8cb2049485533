"""Every create written down before it leaves (dead_runs.BackendJournal, on a file:// backend)
and the ClientToken the API proxy gives a create that has none (write_safety): what the next
operation finds, what settles a record, the bound on a slot's outstanding creates."""

import json
import time
import uuid
from pathlib import Path

import pytest
from pydantic import SecretStr

from spotpool.api.stackconfig import TAG_POOL_UID, TAG_SLOT, PoolIdentity
from spotpool.engine.basics.settings import EngineSettings
from spotpool.engine.leftovers import dead_runs
from spotpool.engine.stacks.stack import PoolStack
from spotpool.engine.tencent import write_safety
from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.recent_writes import RecentWrites
from spotpool.engine.tencent.write_safety import CreateRecord, Kind, OutstandingCreates

pytestmark = pytest.mark.unit


def _stack(tmp_path: Path) -> PoolStack:
    (tmp_path / "backend").mkdir(exist_ok=True)
    settings = EngineSettings(
        backend_url=f"file://{tmp_path / 'backend'}",
        passphrase=SecretStr("p"),
        work_root=tmp_path / "work",
    )
    credentials = Credentials(secret_id=SecretStr("AKID"), secret_key=SecretStr("k"))
    identity = PoolIdentity(namespace="team-a", name="gpu", uid=str(uuid.uuid4()))
    return PoolStack(identity, settings, credentials, "ap-guangzhou")


def _run_instances(slot: int, uid: str = "uid-1", **extra: object) -> bytes:
    tags = [{"Key": TAG_POOL_UID, "Value": uid}, {"Key": TAG_SLOT, "Value": str(slot)}]
    body = {"InstanceCount": 1, "TagSpecification": [{"ResourceType": "instance", "Tags": tags}]}
    return json.dumps({**body, **extra}).encode()


def test_a_create_gets_one_token_per_run_and_request_and_keeps_its_own() -> None:
    first, token = write_safety.with_client_token(_run_instances(0), "run-a")
    again, same = write_safety.with_client_token(_run_instances(0), "run-a")
    _, other_run = write_safety.with_client_token(_run_instances(0), "run-b")
    _, other_slot = write_safety.with_client_token(_run_instances(1), "run-a")
    assert token is not None and token == same and first == again  # a re-send: the same
    assert len({token, other_run, other_slot}) == 3
    assert len(token) <= 64 and token.isascii()
    assert json.loads(first)["ClientToken"] == token
    given = _run_instances(0, ClientToken="mine")
    assert write_safety.with_client_token(given, "run-a") == (given, "mine")


def test_a_create_names_its_pool_and_slot_and_kinds_decide_the_repeats() -> None:
    record = write_safety.create_record(_run_instances(2, uid="uid-9"), "t")
    assert (record.pool_uid, record.slot) == ("uid-9", 2)
    assert write_safety.create_record(b"{}", "t").slot is None
    assert write_safety.kind_of("RunInstances") is Kind.CREATE
    assert write_safety.kind_of("DescribeInstances") is Kind.READ
    assert write_safety.kind_of("TerminateInstances") is Kind.IDEMPOTENT
    assert write_safety.kind_of("StopInstances") is Kind.WRITE
    assert write_safety.kind_of("ModifyResourceTags") is Kind.IDEMPOTENT


def test_a_lagging_listing_of_a_just_terminated_instance_is_not_taken_as_running() -> None:
    reply = {
        "Response": {
            "TotalCount": 2,
            "InstanceSet": [
                {"InstanceId": "ins-gone", "InstanceState": "RUNNING"},
                {"InstanceId": "ins-live", "InstanceState": "RUNNING"},
            ],
        }
    }
    cleaned = write_safety.without_stale(json.dumps(reply).encode(), lambda i: i == "ins-gone")
    response = json.loads(cleaned)["Response"]
    assert [i["InstanceId"] for i in response["InstanceSet"]] == ["ins-live"]
    assert response["TotalCount"] == 1


def test_a_launch_is_remembered_until_listed_and_no_longer_than_the_bound() -> None:
    recent = RecentWrites(bound=0.3)
    recent.launched(["ins-a", "ins-b"])
    assert recent.unlisted(["ins-a", "ins-b", "ins-c"]) == {"ins-a", "ins-b"}
    recent.listed(["ins-a"])
    assert recent.unlisted(["ins-a", "ins-b"]) == {"ins-b"}
    recent.terminated(["ins-b"])
    assert recent.unlisted(["ins-b"]) == set() and recent.terminated_recently("ins-b")
    time.sleep(0.35)
    assert not recent.terminated_recently("ins-b")
    recent.launched(["ins-d"])
    time.sleep(0.35)
    assert recent.unlisted(["ins-d"]) == set()


def test_a_create_is_found_again_by_its_slot_and_its_answer(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    journal = dead_runs.BackendJournal(stack)
    lost = CreateRecord(token="spotpool-a", pool_uid=stack.pool.uid, slot=1)
    journal.record(lost)  # its answer never comes
    answered = CreateRecord(token="spotpool-b", pool_uid=stack.pool.uid, slot=2)
    journal.record(answered)
    journal.record(answered)  # the provider's re-send of the same create: one record
    answered.instance_ids = ["ins-2"]
    journal.answered(answered)
    found = dead_runs.read(stack, with_ids=True)
    assert found.slots == {1, 2}
    assert found.ids == {"ins-2": 2}
    assert list(found.unanswered.values()) == [1]
    assert len(found.creates) == 2
    assert dead_runs.recorded(stack) == {1, 2}


def test_a_record_settles_once_held_or_once_a_sweep_came_late_enough(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    journal = dead_runs.BackendJournal(stack)
    held = CreateRecord(token="t-held", pool_uid=stack.pool.uid, slot=0, instance_ids=["ins-0"])
    journal.record(held)
    journal.answered(held)
    journal.record(CreateRecord(token="t-lost", pool_uid=stack.pool.uid, slot=1))
    dead_runs.settle(stack, time.time(), held=["ins-0"])
    assert dead_runs.recorded(stack) == {1}  # the lost one waits for a sweep late enough
    dead_runs.settle(stack, time.time() + dead_runs.LISTING_LAG, held=[])
    assert dead_runs.recorded(stack) == frozenset()


def test_a_slot_has_at_most_three_outstanding_creates(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    journal = dead_runs.BackendJournal(stack)
    for n in range(dead_runs.MAX_OUTSTANDING):
        journal.record(CreateRecord(token=f"t-{n}", pool_uid=stack.pool.uid, slot=0))
    with pytest.raises(OutstandingCreates, match=r"slot 0 .* 3 creates not yet found again"):
        dead_runs.BackendJournal(stack).record(
            CreateRecord(token="t-next", pool_uid=stack.pool.uid, slot=0)
        )
    journal.record(CreateRecord(token="t-other", pool_uid=stack.pool.uid, slot=1))  # its own
    dead_runs.settle(stack, None)  # the pool's stack is gone: every record with it
    assert dead_runs.read(stack).creates == {}
