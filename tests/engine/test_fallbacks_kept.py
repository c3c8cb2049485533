"""A slot placed elsewhere than the spec's first zone (no stock there: a fallback) keeps its
place through the operator's other runs — a targeted replacement of another slot, a surge's
start and retirement — so the next full `up` does not move it back (a zone change replaces a
running instance). The real engine and provider against the emulator."""

from pathlib import Path

import pytest

from spotpool.api.notices import NoticeAgent
from spotpool.api.spec import ChargeType
from spotpool.api.stackconfig import StackConfig
from spotpool.engine.stacks.stack import PoolStack
from spotpool.localworld.emulator import wait_until
from tests.engine._support.fast_launch import pool_instances, preview_expecting_no_changes
from tests.engine.conftest import EngineWorld

pytestmark = pytest.mark.integration
TYPE, Z2, Z3 = "GN7.2XLARGE32", "ap-singapore-2", "ap-singapore-3"
AGENT = NoticeAgent(url="http://10.0.0.5:8090", command="spotpool notice-agent")


def _placed(world: EngineWorld, config: StackConfig, stack: PoolStack) -> dict[int, str]:
    """Two slots; slot 1 finds no stock in the first zone and lands in the second."""
    world.emulator.admin_ok(
        "POST", "/_emulator/capacity", {"Zone": Z2, "InstanceType": TYPE, "Available": 1}
    )

    def replan(config: StackConfig, slots: list[int]) -> StackConfig | None:
        return config.placing({s: (Z3, TYPE, ChargeType.SPOTPAID) for s in slots})

    first = stack.up(config, replan=replan)
    zones = {i.slot: i.zone for i in first.instances}
    assert zones == {0: Z2, 1: Z3}, zones
    return {i.slot: i.instance_id for i in first.instances}


def test_a_targeted_replacement_keeps_another_slots_fallback(
    world: EngineWorld, tmp_path: Path
) -> None:
    stack = world.pool()
    config = world.config(stack, 2)
    ids = _placed(world, config, stack)
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [ids[0]]})
    wait_until(lambda: ids[0] not in pool_instances(world, stack), "the reclaim", timeout=30)
    world.emulator.admin_ok(
        "POST", "/_emulator/capacity", {"Zone": Z2, "InstanceType": TYPE, "Available": 5}
    )

    # Targeted when this process knows the stack; a full up when it must (a launch intent
    # pending, the stack not repaired yet, as a fresh-clone run met once): either keeps slot 1.
    stack.replace_slots(config, [0])
    again = stack.up(config)

    assert {i.slot: i.instance_id for i in again.instances}[1] == ids[1]
    assert (again.changes.create, again.changes.replace, again.changes.delete) == (0, 0, 0)
    preview_expecting_no_changes(world, stack, tmp_path)


def test_a_surge_started_and_retired_keeps_another_slots_fallback(
    world: EngineWorld, tmp_path: Path
) -> None:
    stack = world.pool()
    config = world.config(stack, 2).model_copy(update={"notice_agent": AGENT})
    ids = _placed(world, config, stack)
    world.emulator.admin_ok(
        "POST", "/_emulator/capacity", {"Zone": Z2, "InstanceType": TYPE, "Available": 5}
    )

    assert [s.slot for s in stack.start_surge(config, [0]).surges] == [0]
    stack.retire_surges(config, [0])
    again = stack.up(config)

    assert {i.slot: (i.instance_id, i.zone) for i in again.instances} == {
        0: (ids[0], Z2), 1: (ids[1], Z3)
    }  # fmt: skip
    assert (again.changes.create, again.changes.replace, again.changes.delete) == (0, 0, 0)
    preview_expecting_no_changes(world, stack, tmp_path)
