"""A destroy after a reclaim, for real (issue 33, path 10): the stack's state still holds an
instance the cloud took back (Tencent Cloud answers its TerminateInstances
`InvalidInstanceId.NotFound`), and the fast path launched the slot's replacement that no state
holds yet. The destroy refreshes first, so it finishes, and the replacement is terminated. A
Retain deletion marks what it keeps (backend record and tag), so no sweep takes it."""

import uuid

import pytest

from spotpool.api.stackconfig import PoolIdentity
from spotpool.engine.launches import fast_launch
from spotpool.engine.leftovers.retained import retained_uids
from spotpool.engine.stacks.stack import PoolStack
from spotpool.engine.tencent.cloud import TAG_RETAINED
from spotpool.localworld.emulator import wait_until
from tests.engine.conftest import REGION, EngineWorld

pytestmark = pytest.mark.integration


def _pool(world: EngineWorld) -> PoolStack:
    """The real orphan grace: the fast path's young instance goes only because its intent
    proves whose it is."""
    settings = world.settings.model_copy(update={"orphan_min_age": 900.0})
    identity = PoolIdentity(namespace="team-a", name="gone", uid=str(uuid.uuid4()))
    return PoolStack(identity, settings, world.credentials, REGION, world.progress.append)


def _live(world: EngineWorld, stack: PoolStack) -> set[str]:
    gone = {"TERMINATING", "SHUTDOWN", "LAUNCH_FAILED"}
    return {i for i, state in world.cloud_instances(stack).items() if state not in gone}


def test_destroy_after_a_reclaim_finishes_and_terminates_the_fast_paths_launch(
    world: EngineWorld,
) -> None:
    stack = _pool(world)
    config = world.config(stack, 1)
    (first,) = stack.up(config).instances
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [first.instance_id]})
    wait_until(lambda: first.instance_id not in _live(world, stack), "the reclaim", timeout=30)
    launched = fast_launch.launch_replacements(stack, config, [0])
    replacement = launched.instances[0]
    assert _live(world, stack) == {replacement}

    stack.destroy()

    assert _live(world, stack) == set()
    terminated = world.emulator.admin_ok("GET", "/_emulator/requests?action=TerminateInstances")[
        "Requests"
    ]
    assert all(c["Code"] == "OK" for c in terminated), terminated  # no NotFound asked for


def test_retain_records_the_pool_and_tags_what_it_keeps(world: EngineWorld) -> None:
    stack = world.pool()
    (kept,) = stack.up(world.config(stack, 1)).instances
    stack.forget()
    assert stack.pool.uid in retained_uids(world.settings.backend_url)
    (item,) = [i for i in world.emulator.all_instances() if i["InstanceId"] == kept.instance_id]
    assert TAG_RETAINED in {t["Key"] for t in item["Tags"]}
