"""A run's creates are safe to lose and to repeat, for real (pulumi CLI, tencentcloud plugin,
the API proxy, an emulator that loses answers after the effect and lags its listing).

The provider we build sends RunInstances with no ClientToken and crashes on an instance a
lagging listing does not show yet; the proxy gives each create its token, sends it again only
with it, waits for the listing to catch up with what it launched, and writes each create down
before it leaves, so a create whose answer never came is found again at once."""

from typing import Any

import pytest

from spotpool.engine.basics.errors import EngineError
from spotpool.engine.leftovers import dead_runs
from tests.engine.conftest import EngineWorld

pytestmark = pytest.mark.integration


def _misbehave(world: EngineWorld, **settings: Any) -> dict[str, Any]:
    reply: dict[str, Any] = world.emulator.admin_ok("POST", "/_emulator/misbehaviour", settings)
    return reply


def _made(world: EngineWorld, uid: str) -> list[str]:
    """Every instance ever made for the pool, gone ones too."""
    return [
        item["InstanceId"]
        for item in world.emulator.all_instances()
        if {"Key": "spotpool-pool-uid", "Value": uid} in (item.get("Tags") or [])
    ]


def test_lost_answers_and_a_lagging_listing_make_one_instance_a_slot(world: EngineWorld) -> None:
    world.settings = world.settings.model_copy(update={"orphan_min_age": 900})
    stack = world.pool()
    _misbehave(world, LoseAnswers={"Rate": 0.5}, ListingLagSeconds=3)

    for _ in range(3):  # the provider's polls would crash on the lag
        try:
            result = stack.up(world.config(stack, 10))
            break
        except EngineError:  # one create lost all 6 answers (1 in 64): the next up adopts it
            continue

    held = sorted(i.instance_id for i in result.instances)
    lost = world.emulator.lost_answers()
    assert lost.get("RunInstances", 0) >= 1, lost  # 10 creates at 50 %: none lost 1 in 1,024
    assert sorted(_made(world, stack.pool.uid)) == held  # no second instance for any slot
    assert len(held) == 10
    assert dead_runs.read(stack).creates == {}  # every create held: its record settled


def test_a_create_whose_answer_never_came_is_adopted_by_the_next_up_at_once(
    world: EngineWorld,
) -> None:
    world.settings = world.settings.model_copy(update={"orphan_min_age": 900})
    stack = world.pool()
    _misbehave(world, LoseAnswers={"Rate": 1.0, "Actions": ["RunInstances"]})
    with pytest.raises(EngineError):
        stack.up(world.config(stack, 1))  # each send of the one token took effect, none answered
    made = _made(world, stack.pool.uid)
    assert len(made) == 1, made  # its repeats carried its token: one instance
    assert dead_runs.recorded(stack) == {0}  # written down before it left
    world.emulator.admin_ok("DELETE", "/_emulator/misbehaviour")

    result = stack.up(world.config(stack, 1))

    assert [i.instance_id for i in result.instances] == made  # adopted, young as it is
    assert any("adopted" in note for note in result.recovered), result.recovered
    assert _made(world, stack.pool.uid) == made


def test_a_deletion_terminates_a_lost_create_at_once(world: EngineWorld) -> None:
    world.settings = world.settings.model_copy(update={"orphan_min_age": 900})
    stack = world.pool()
    stack.up(world.config(stack, 1))
    _misbehave(world, LoseAnswers={"Rate": 1.0, "Actions": ["RunInstances"]})
    with pytest.raises(EngineError):
        stack.up(world.config(stack, 2))  # slot 1's create made its instance, no answer came
    world.emulator.admin_ok("DELETE", "/_emulator/misbehaviour")
    assert len(world.cloud_instances(stack)) == 2

    stack.destroy()  # no wait for the orphan grace: the record proves slot 1's instance ours

    assert {i: s for i, s in world.cloud_instances(stack).items() if s == "RUNNING"} == {}
    assert dead_runs.read(stack).creates == {}
