"""A targeted replacement after a shard hand-over (issue 33, path 6): the fast-path instance
another replica launched for a slot — its intent in the backend, not in this process's memory —
is adopted by this replica's `replace_slots`, never duplicated by a Pulumi create beside it."""

import pytest

from spotpool.engine.launches import fast_launch, launch_intents
from tests.engine._support.fast_launch import (
    PASSWORD,
    pool_instances,
    pool_stack,
    storm_config,
    up_and_reclaim,
)
from tests.engine.conftest import EngineWorld

pytestmark = pytest.mark.integration


def test_a_targeted_replacement_adopts_another_replicas_launch(world: EngineWorld) -> None:
    stack = pool_stack(world)
    config = storm_config(world, stack, 2)
    first = up_and_reclaim(world, stack, config, 0)
    # The replica that held the pool's shard launched slot 0's next instance, then its shard
    # came back here: this process knows the stack (its URNs) but not that launch.
    (fast_id,) = fast_launch.launch_replacements(stack, config, [0], PASSWORD).instances.values()
    launch_intents.PENDING.clear()

    replaced = stack.replace_slots(config, [0], PASSWORD)

    assert {i.slot: i.instance_id for i in replaced.instances} == {0: fast_id, 1: first[1]}
    assert replaced.changes.create == 0
    assert sorted(pool_instances(world, stack)) == sorted([fast_id, first[1]])
    assert launch_intents.read_intent(stack).slots == {}
