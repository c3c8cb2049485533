"""Placement through the real engine and provider: a slot the cloud has no stock for is sent
elsewhere by the operator's replan in the same operation, and a slot's charge type moving
(spot -> on-demand -> spot) replaces its instance, the new one made first."""

import pytest

from spotpool.api.spec import ChargeType
from spotpool.api.stackconfig import StackConfig
from tests.engine.conftest import EngineWorld

pytestmark = pytest.mark.integration
TYPE, Z2, Z3 = "GN7.2XLARGE32", "ap-singapore-2", "ap-singapore-3"
SPOT, ON_DEMAND = ChargeType.SPOTPAID, ChargeType.POSTPAID_BY_HOUR


def charges(world: EngineWorld, ids: set[str]) -> dict[str, str]:
    return {
        i["InstanceId"]: i["InstanceChargeType"]
        for i in world.emulator.all_instances()
        if i["InstanceId"] in ids
    }


def test_no_stock_is_replanned_elsewhere_and_charge_changes_replace(world: EngineWorld) -> None:
    world.emulator.admin_ok(
        "POST", "/_emulator/capacity", {"Zone": Z2, "InstanceType": TYPE, "Available": 0}
    )
    stack = world.pool()
    asked: list[list[int]] = []

    def replan(config: StackConfig, slots: list[int]) -> StackConfig | None:
        asked.append(slots)
        return config.placing({s: (Z3, TYPE, SPOT) for s in slots})

    first = stack.up(world.config(stack, 1).placing({0: (Z2, TYPE, SPOT)}), replan=replan)

    assert asked == [[0]]
    (spot,) = first.instances
    assert (spot.zone, spot.charge_type) == (Z3, "SPOTPAID")
    assert any("no spot stock: slot 0 → ap-singapore-3" in n for n in first.recovered)

    on_demand = stack.up(world.config(stack, 1).placing({0: (Z3, TYPE, ON_DEMAND)}))
    (fallback,) = on_demand.instances
    assert fallback.instance_id != spot.instance_id and fallback.charge_type == ON_DEMAND
    assert on_demand.changes.replace == 1
    assert set(world.cloud_instances(stack)) == {fallback.instance_id}
    assert charges(world, {fallback.instance_id}) == {fallback.instance_id: ON_DEMAND}

    back = stack.up(world.config(stack, 1).placing({0: (Z3, TYPE, SPOT)}))
    (returned,) = back.instances
    assert returned.charge_type == SPOT and returned.instance_id != fallback.instance_id
    assert set(world.cloud_instances(stack)) == {returned.instance_id}
    again = stack.up(world.config(stack, 1).placing({0: (Z3, TYPE, SPOT)}))
    assert (again.changes.create, again.changes.replace, again.changes.delete) == (0, 0, 0)
