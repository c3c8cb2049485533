"""The storm fast path inside the writer's fence (issue 33, paths 1, 2, 5): a launch that waited
at the account's RunInstances bucket while its pool moved to another replica (and was deleted)
sends nothing; launch intents are kept per slot, so a writer with a stale copy cannot erase
what the next holder added, on file:// and s3:// alike; a launch whose earlier try may have
made the instance keeps its intent. The cloud is the emulator (official SDK calls); no Pulumi
run is needed here."""

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException

from spotpool.api.stackconfig import PoolIdentity
from spotpool.engine.fencing.processes import fenced
from spotpool.engine.launches import fast_launch, launch_intents
from spotpool.engine.stacks.stack import PoolStack
from spotpool.engine.state.backend_files import open_backend
from spotpool.engine.tencent import cloud
from spotpool.engine.tencent.ratelimit import Buckets, RateLimits
from spotpool.localworld.emulator import wait_until
from spotpool.localworld.engine import REGION, EngineWorld
from tests.emulator.harness import SECRET_ID
from tests.engine._support.worlds import engine_world, s3_backend

pytestmark = pytest.mark.integration


@pytest.fixture(params=["file", "s3"])
def backend_world(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[EngineWorld]:
    """The emulator, with the stacks' backend a directory or a real S3 server (versitygw)."""
    if request.param == "file":
        backend = f"file://{tmp_path / 'backend'}"
    else:
        backend = s3_backend(request.getfixturevalue("s3_server"), monkeypatch)
    with engine_world(tmp_path, backend, orphan_min_age=900.0) as world:
        yield world


@pytest.fixture
def file_world(tmp_path: Path) -> Iterator[EngineWorld]:
    with engine_world(tmp_path, f"file://{tmp_path / 'backend'}", orphan_min_age=900.0) as world:
        yield world


def _pool(world: EngineWorld) -> PoolStack:
    identity = PoolIdentity(namespace="team-a", name="gpu", uid=str(uuid.uuid4()))
    return PoolStack(identity, world.settings, world.credentials, REGION)


def _launches(world: EngineWorld) -> list[dict[str, Any]]:
    """The RunInstances requests the fast path sent (it alone sends a ClientToken of ours)."""
    found = world.emulator.admin_ok("GET", "/_emulator/requests?action=RunInstances")
    return [r["Params"] for r in found["Requests"] if "ClientToken" in r["Params"]]


def _instances_of(world: EngineWorld, stack: PoolStack) -> list[str]:
    return sorted(world.cloud_instances(stack))


class ShardFence:
    """A replica's fence for one shard: passes until the shard is taken over."""

    def __init__(self) -> None:
        self.lost = threading.Event()

    def __call__(self) -> None:
        if self.lost.is_set():
            raise RuntimeError("shard 3 (token 1) is no longer held by this replica")


def test_a_launch_waiting_at_the_bucket_sends_nothing_once_its_pool_moved_and_went(
    file_world: EngineWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Path 1: replica A's launch for pool P waits its turn at the account's RunInstances
    bucket (a storm); P's shard moves to replica C, the user deletes P, C removes its launch
    intents. A's launch must not be sent when its turn comes, nor write an intent back: else an
    instance runs that carries a pool uid no pool has."""
    world = file_world
    stack = _pool(world)
    config = world.config(stack, 2)
    slow = Buckets(RateLimits(rates={"RunInstances": 1.0}))
    monkeypatch.setattr(cloud, "BUCKETS", slow)
    bucket = slow.bucket(SECRET_ID, REGION, "RunInstances")
    for _ in range(5):  # the storm's launches ahead of this one: ~5 s to wait
        bucket.reserve()
    fence = ShardFence()
    outcome: list[BaseException | fast_launch.FastLaunch] = []

    def replica_a() -> None:
        with fenced(fence):
            try:
                outcome.append(fast_launch.launch_replacements(stack, config, [0, 1]))
            except Exception as error:
                outcome.append(error)

    thread = threading.Thread(target=replica_a)
    thread.start()
    # A's intents are written before it waits at the bucket: it is waiting now.
    wait_until(lambda: len(launch_intents.read_intent(stack).slots) == 2, "A's intents", 10)
    fence.lost.set()  # C took the shard over; the pool is deleted:
    launch_intents.forget(stack)  # C's destroy removes its intents
    thread.join(timeout=60)

    assert not thread.is_alive()
    assert isinstance(outcome[0], RuntimeError), outcome
    assert _launches(world) == []  # nothing sent after the wait
    assert _instances_of(world, stack) == []
    files = open_backend(world.settings.backend_url)
    assert files is not None and files.keys(launch_intents.intent_key(stack.name)) == []


def test_a_launch_is_stopped_while_it_waits_not_after_its_turn(
    file_world: EngineWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drain of a shard waits for the shard's launches: one waiting at the bucket ends
    as soon as the fence goes, not when its turn would have come (a minute, in a storm)."""
    world = file_world
    stack = _pool(world)
    config = world.config(stack, 1)
    slow = Buckets(RateLimits(rates={"RunInstances": 0.05}))  # one launch every 20 s
    monkeypatch.setattr(cloud, "BUCKETS", slow)
    slow.bucket(SECRET_ID, REGION, "RunInstances").reserve()
    slow.bucket(SECRET_ID, REGION, "RunInstances").reserve()
    fence = ShardFence()
    ended = threading.Event()

    def replica_a() -> None:
        with fenced(fence), pytest.raises(RuntimeError):
            fast_launch.launch_replacements(stack, config, [0])
        ended.set()

    thread = threading.Thread(target=replica_a, daemon=True)
    thread.start()
    wait_until(lambda: bool(launch_intents.read_intent(stack).slots), "A's intent", 10)
    fence.lost.set()
    assert ended.wait(timeout=10), "the launch still waits for its turn"
    assert _launches(world) == []


def test_a_late_writer_cannot_erase_the_launches_the_next_holder_added(
    backend_world: EngineWorld,
) -> None:
    """Path 2: replica A read the pool's intent (slot 0 launched by it), stalled; the next
    holder launched slot 1. A's late write of its stale copy — a settle after its up, or a
    store of what it read — leaves slot 1's launch in place, on file:// and s3:// alike."""
    world = backend_world
    stack = _pool(world)
    config = world.config(stack, 2)
    (a_id,) = fast_launch.launch_replacements(stack, config, [0]).instances.values()
    stale = launch_intents.read_intent(stack)  # A's copy, then A stalls
    (b_id,) = fast_launch.launch_replacements(stack, config, [1]).instances.values()

    launch_intents.write_intent(stack, stale)  # A's late rewrite of what it had read
    assert launch_intents.read_intent(stack).slots[1].instance_id == b_id
    launch_intents.settle(stack, stale, {0: a_id})  # A's up adopted slot 0, late
    left = launch_intents.read_intent(stack)
    assert set(left.slots) == {1} and left.slots[1].instance_id == b_id
    assert launch_intents.pending_stacks(world.settings.backend_url) == [stack.name]
    launch_intents.PENDING.clear()  # another process: it sees the intent in the backend
    assert launch_intents.has_pending(stack)


def test_an_answer_after_a_lost_reply_keeps_the_intent_of_the_instance_it_may_have_made(
    file_world: EngineWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Path 5: the first try's request reached the cloud and made the instance, its reply was
    lost (a timeout); the retry is answered with an error about the ClientToken. The intent
    stays, naming the token, so the next up adopts the instance rather than making another."""
    world = file_world
    stack = _pool(world)
    config = world.config(stack, 1)
    real = cloud.limited
    tries: list[str] = []

    def lossy(client: Any, action: str, request: Any, *rest: Any, **options: Any) -> Any:
        tries.append(action)
        if len(tries) == 1:
            real(client, action, request, *rest, **options)  # made, and the reply lost
            raise TencentCloudSDKException("ClientNetworkError", "read timed out")
        raise TencentCloudSDKException(
            "InvalidParameterValue.ClientTokenConflict", "the ClientToken was used before"
        )

    monkeypatch.setattr(cloud, "limited", lossy)
    done = fast_launch.launch_replacements(stack, config, [0])

    assert done.failed == {0: "InvalidParameterValue.ClientTokenConflict"}
    (made,) = _instances_of(world, stack)
    kept = launch_intents.read_intent(stack).slots
    assert set(kept) == {0} and kept[0].client_token == _launches(world)[0]["ClientToken"]
    assert made  # the instance the intent's token made: adoptable, never a second one


def test_a_plain_refusal_drops_the_intent(
    file_world: EngineWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refusal with no earlier try in doubt (no stock) made nothing: its intent goes."""
    world = file_world
    stack = _pool(world)
    config = world.config(stack, 1)

    def refused(client: Any, action: str, request: Any, *rest: Any, **options: Any) -> Any:
        raise TencentCloudSDKException("ResourceInsufficient.SpecifiedInstanceType", "no stock")

    monkeypatch.setattr(cloud, "limited", refused)
    done = fast_launch.launch_replacements(stack, config, [0])

    assert done.no_stock == [0]
    assert launch_intents.read_intent(stack).slots == {}
