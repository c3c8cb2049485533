"""The operator's placement: stock look-ups (cached, failures tolerated), avoidance periods,
the engine's replan after a no-stock answer, and where new slots go."""

from typing import Any

import pytest
from pydantic import SecretStr
from spotpool_operator.cloud.capacity import Capacity, CapacitySettings

from spotpool.api.placement import Key, Offering, Slot
from spotpool.api.spec import ChargeType, SpotpoolSpec
from spotpool.api.stackconfig import PoolIdentity, StackConfig
from spotpool.api.status import Instance
from spotpool.engine.tencent.credentials import Credentials

pytestmark = pytest.mark.unit

SPOT, ON_DEMAND = ChargeType.SPOTPAID, ChargeType.POSTPAID_BY_HOUR
Z1, Z2 = "ap-singapore-2", "ap-singapore-3"
TYPE = "S5.LARGE8"
KEYS = Credentials(secret_id=SecretStr("AKIDx"), secret_key=SecretStr("k"))


def spec(**changes: Any) -> SpotpoolSpec:
    return SpotpoolSpec.model_validate(
        {
            "region": "ap-singapore",
            "availabilityZones": [Z1, Z2],
            "instanceType": TYPE,
            "maximum": 4,
            "replicas": 2,
            "imageId": "img-abc",
            "credentialsSecretRef": {"name": "c"},
            **changes,
        }
    )


def config(s: SpotpoolSpec) -> StackConfig:
    return StackConfig.from_spec(PoolIdentity(namespace="n", name="p", uid="u"), s)


class Stock:
    def __init__(self) -> None:
        self.sold_out: set[str] = set()
        self.calls = 0
        self.fail = False

    def __call__(
        self, credentials: Credentials, region: str, zones: list[str], types: list[str],
        charges: list[ChargeType],
    ) -> dict[Key, Offering]:  # fmt: skip
        self.calls += 1
        if self.fail:
            raise RuntimeError("RequestLimitExceeded")
        found = {}
        for zone in zones:
            for kind in types:
                for charge in charges:
                    out = charge is SPOT and zone in self.sold_out
                    status, category = (
                        ("SOLD_OUT", "WithoutStock") if out else ("SELL", "EnoughStock")
                    )
                    offering = Offering.from_api(zone, kind, charge.value, status, category)
                    found[offering.key] = offering
        return found


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_new_slots_avoid_the_sold_out_zone_and_live_ones_stay() -> None:
    lister, s = Stock(), spec()
    lister.sold_out.add(Z1)
    capacity = Capacity(lister)

    placed = capacity.plan(s, config(s), {1: Slot(Z2, TYPE, SPOT)}, [0], KEYS, "ap-singapore")

    assert placed.zone_of(0) == Z2 and placed.zone_of(1) == Z2
    assert placed.charge_of(0) is SPOT


def test_stock_is_asked_once_per_ttl_and_a_failed_look_up_places_by_spec_order() -> None:
    lister, clock, s = Stock(), Clock(), spec()
    capacity = Capacity(lister, CapacitySettings(stock_ttl=5), clock=clock)
    capacity.stock(KEYS, "ap-singapore", s)
    capacity.stock(KEYS, "ap-singapore", s)
    assert lister.calls == 1
    clock.now += 6
    lister.fail = True
    assert capacity.stock(KEYS, "ap-singapore", s)  # the last answer serves meanwhile
    fresh = Capacity(lister)
    assert fresh.stock(KEYS, "ap-singapore", s) == {}
    placed = fresh.plan(s, config(s), {}, [0, 1], KEYS, "ap-singapore")
    assert [placed.zone_of(0), placed.zone_of(1)] == [Z1, Z2]


def test_a_reclaim_avoids_its_zone_for_the_avoid_period() -> None:
    lister, clock, s = Stock(), Clock(), spec()
    capacity = Capacity(lister, CapacitySettings(avoid_seconds=180), clock=clock)
    capacity.reclaimed([Instance(instance_id="ins-1", zone=Z1, instance_type=TYPE, slot=0)], SPOT)

    assert capacity.plan(s, config(s), {}, [0], KEYS, "ap-singapore").zone_of(0) == Z2
    clock.now += 181
    assert capacity.avoided().soft == frozenset()
    assert capacity.plan(s, config(s), {}, [0], KEYS, "ap-singapore").zone_of(0) == Z1


def test_the_engines_replan_avoids_the_refused_offering_and_moves_the_slot() -> None:
    lister, s = Stock(), spec()
    capacity = Capacity(lister)
    replan = capacity.replanner(s, KEYS, "ap-singapore")
    first = config(s).placing({0: (Z1, TYPE, SPOT), 1: (Z1, TYPE, SPOT)})

    moved = replan(first, [0])

    assert moved is not None and moved.zone_of(0) == Z2 and moved.zone_of(1) == Z1
    assert (Z1, TYPE, SPOT) in capacity.avoided().hard
    assert replan(moved, [0]) is None  # both refused now: nowhere left, the engine says so


def test_with_fallback_a_refused_slot_goes_on_demand_and_moving_back_never_falls_back() -> None:
    lister, s = Stock(), spec(onDemandFallback={"enabled": True, "maxOnDemand": 1})
    lister.sold_out.update({Z1, Z2})
    capacity = Capacity(lister)

    placed = capacity.plan(s, config(s), {1: Slot(Z2, TYPE, SPOT)}, [0], KEYS, "ap-singapore")
    assert placed.charge_of(0) is ON_DEMAND and placed.on_demand_slots() == [0]

    live = {0: Slot(Z1, TYPE, ON_DEMAND), 1: Slot(Z2, TYPE, SPOT)}
    stay = capacity.plan(s, config(s), live, [], KEYS, "ap-singapore", back_to_spot=[0])
    assert stay.charge_of(0) is ON_DEMAND  # still sold out: left where it is
    lister.sold_out.clear()
    fresh = Capacity(lister)
    back = fresh.plan(s, config(s), live, [], KEYS, "ap-singapore", back_to_spot=[0])
    assert back.charge_of(0) is SPOT and back.zone_of(0) == Z1


def test_a_live_slot_the_spec_no_longer_allows_is_placed_afresh() -> None:
    """instanceType changed in the spec: the live slot gets the new type (so it is replaced)."""
    s = spec(instanceType="S5.2XLARGE16")
    live = {0: Slot(Z1, TYPE, SPOT), 1: Slot("ap-singapore-4", "S5.2XLARGE16", SPOT)}

    placed = Capacity(Stock()).plan(s, config(s), live, [], KEYS, "ap-singapore")

    assert [placed.type_of(0), placed.type_of(1)] == ["S5.2XLARGE16"] * 2
    assert placed.zone_of(1) in (Z1, Z2)  # a zone the spec lists


def test_a_no_stock_answer_drops_the_cached_stock() -> None:
    lister, s = Stock(), spec()
    capacity = Capacity(lister, CapacitySettings(stock_ttl=60))
    capacity.stock(KEYS, "ap-singapore", s)
    capacity.replanner(s, KEYS, "ap-singapore")(config(s).placing({0: (Z1, TYPE, SPOT)}), [0])

    assert lister.calls == 2  # the replan asked afresh
