"""Placement decisions (pure): ranking by stock, avoidance, on-demand fallback, hysteresis."""

import pytest

from spotpool.api.placement import (
    Avoided,
    Key,
    NoCapacity,
    Offering,
    Slot,
    Stock,
    Wants,
    candidates,
    due_back_to_spot,
    place,
    seen_since,
    spot_fills,
    spot_sells_well,
)
from spotpool.api.spec import ChargeType, PlacementStrategy

pytestmark = pytest.mark.unit

SPOT, ON_DEMAND = ChargeType.SPOTPAID, ChargeType.POSTPAID_BY_HOUR
Z1, Z2, Z3 = "ap-x-1", "ap-x-2", "ap-x-3"
A, B = "S5.LARGE8", "SA2.LARGE8"


def stock(*items: tuple[str, str, str, str], charge: ChargeType = SPOT) -> dict[Key, Offering]:
    """(zone, type, Status, StatusCategory) rows as the API answers them."""
    offers = [Offering.from_api(z, t, charge.value, status, cat) for z, t, status, cat in items]
    return {o.key: o for o in offers}


def wants(**changes: object) -> Wants:
    base: dict[str, object] = {"zones": [Z1, Z2], "types": [A, B]}
    return Wants(**{**base, **changes})  # type: ignore[arg-type]


def test_sold_out_offerings_are_skipped_and_enough_stock_ranks_before_under_stock() -> None:
    w = wants(
        stock=stock(
            (Z1, A, "SOLD_OUT", "WithoutStock"),
            (Z2, A, "SELL", "UnderStock"),
            (Z1, B, "SELL", "EnoughStock"),
            (Z2, B, "SELL", "NormalStock"),
        )
    )

    assert candidates(w, SPOT) == [(Z1, B, SPOT), (Z2, B, SPOT), (Z2, A, SPOT)]


def test_without_stock_answers_the_spec_order_ranks() -> None:
    """The look-up failed: types in the spec's order, zones in the spec's order."""
    assert candidates(wants(), SPOT) == [(Z1, A, SPOT), (Z2, A, SPOT), (Z1, B, SPOT), (Z2, B, SPOT)]


def test_new_slots_spread_over_zones_of_equal_rank_and_live_slots_stay() -> None:
    live = {0: Slot(Z1, A, SPOT)}

    placed = place(wants(zones=[Z1, Z2, Z3]), live, [1, 2, 3])

    assert 0 not in placed
    assert [placed[s].zone for s in (1, 2, 3)] == [Z2, Z3, Z1]
    assert {placed[s].instance_type for s in placed} == {A}


def test_a_zone_sold_out_moves_the_replacement_to_the_other_zone() -> None:
    w = wants(
        types=[A], stock=stock((Z1, A, "SOLD_OUT", "WithoutStock"), (Z2, A, "SELL", "EnoughStock"))
    )

    placed = place(w, {1: Slot(Z2, A, SPOT)}, [0])

    assert placed == {0: Slot(Z2, A, SPOT)}


def test_no_stock_answers_are_never_tried_and_reclaimed_ones_only_last() -> None:
    hard = wants(types=[A], avoided=Avoided(hard=frozenset({(Z1, A, SPOT)})))
    assert place(hard, {}, [0]) == {0: Slot(Z2, A, SPOT)}

    soft = wants(types=[A], avoided=Avoided(soft=frozenset({(Z1, A, SPOT)})))
    assert candidates(soft, SPOT) == [(Z2, A, SPOT), (Z1, A, SPOT)]
    only = wants(zones=[Z1], types=[A], avoided=Avoided(soft=frozenset({(Z1, A, SPOT)})))
    assert place(only, {}, [0]) == {0: Slot(Z1, A, SPOT)}  # nothing else: still tried
    assert not spot_fills(only)


def test_nothing_sells_and_no_fallback_is_no_capacity() -> None:
    w = wants(
        types=[A],
        stock=stock((Z1, A, "SOLD_OUT", "WithoutStock"), (Z2, A, "SOLD_OUT", "WithoutStock")),
    )

    with pytest.raises(NoCapacity, match="slot 0"):
        place(w, {}, [0])


def test_on_demand_fallback_fills_what_spot_cannot_up_to_its_cap() -> None:
    sold_out = stock((Z1, A, "SOLD_OUT", "WithoutStock"), (Z2, A, "SOLD_OUT", "WithoutStock"))
    w = wants(types=[A], stock=sold_out, max_on_demand=2)

    placed = place(w, {}, [0, 1])
    assert placed == {0: Slot(Z1, A, ON_DEMAND), 1: Slot(Z2, A, ON_DEMAND)}

    with pytest.raises(NoCapacity):  # the cap counts the live on-demand slots too
        place(w, {0: Slot(Z1, A, ON_DEMAND), 1: Slot(Z2, A, ON_DEMAND)}, [2])
    with pytest.raises(NoCapacity):  # a slot moving back to spot may not fall back
        place(w, {}, [0], on_demand_ok=False)
    with pytest.raises(NoCapacity):
        place(wants(types=[A], stock=sold_out), {}, [0])  # fallback off (cap 0)


def test_on_demand_is_taken_only_when_no_spot_offering_can_fill() -> None:
    w = wants(
        types=[A],
        stock=stock((Z1, A, "SOLD_OUT", "WithoutStock"), (Z2, A, "SELL", "UnderStock")),
        max_on_demand=5,
    )
    assert place(w, {}, [0]) == {0: Slot(Z2, A, SPOT)}  # little stock is still spot

    reclaimed = wants(
        zones=[Z1], types=[A], avoided=Avoided(soft=frozenset({(Z1, A, SPOT)})), max_on_demand=1
    )
    assert place(reclaimed, {}, [0]) == {0: Slot(Z1, A, ON_DEMAND)}


def test_spot_sells_well_needs_normal_or_enough_stock_not_avoided() -> None:
    assert not spot_sells_well(wants(types=[A], stock=stock((Z1, A, "SELL", "UnderStock"))))
    assert not spot_sells_well(wants(types=[A], zones=[Z1]))  # unknown stock is no signal
    good = stock((Z1, A, "SELL", "NormalStock"))
    assert spot_sells_well(wants(types=[A], zones=[Z1], stock=good))
    avoided = Avoided(soft=frozenset({(Z1, A, SPOT)}))
    assert not spot_sells_well(wants(types=[A], zones=[Z1], stock=good, avoided=avoided))


def test_stock_category_falls_back_on_status() -> None:
    assert Offering.from_api(Z1, A, "SPOTPAID", "SELL", None).stock is Stock.UNKNOWN
    assert Offering.from_api(Z1, A, "SPOTPAID", "SOLD_OUT", None).stock is Stock.WITHOUT


def test_hysteresis_waits_for_stock_seen_back_a_whole_hold_and_the_slot_a_whole_hold() -> None:
    hold = 300.0
    since: float | None = None
    for now, selling in [(0, True), (100, True), (150, False), (200, True), (400, True)]:
        since = seen_since(since, selling, float(now))
    assert since == 200.0  # the break at 150 restarted the clock

    on_demand = {0: 0.0, 1: 350.0}
    assert due_back_to_spot(on_demand, since, 450.0, hold) == []  # stock back 250 s only
    assert due_back_to_spot(on_demand, since, 500.0, hold) == [0]  # slot 1 on-demand 150 s
    assert due_back_to_spot(on_demand, None, 10_000.0, hold) == []  # stock not back
    assert due_back_to_spot(on_demand, since, 650.0, hold) == [0, 1]


def test_a_slot_that_fell_back_again_waits_a_whole_hold_again() -> None:
    """Moved back at 500, refused, on-demand again at 510: not before 810, whatever the stock."""
    hold = 300.0
    assert due_back_to_spot({0: 510.0}, 0.0, 700.0, hold) == []
    assert due_back_to_spot({0: 510.0}, 0.0, 810.0, hold) == [0]


def priced(*items: tuple[str, str, str, float | None]) -> dict[Key, Offering]:
    """(zone, type, StatusCategory, spot price) rows, every one selling."""
    offers = [Offering.from_api(z, t, "SPOTPAID", "SELL", cat, p) for z, t, cat, p in items]
    return {o.key: o for o in offers}


PRICED = priced(
    (Z1, A, "EnoughStock", 0.30),
    (Z2, A, "UnderStock", 0.05),
    (Z1, B, "NormalStock", 0.10),
    (Z2, B, "EnoughStock", 0.20),
)


def test_price_capacity_optimized_ranks_stock_first_then_the_lower_price() -> None:
    assert candidates(wants(stock=PRICED), SPOT) == [
        (Z1, B, SPOT),  # 0.10, stock to spare
        (Z2, B, SPOT),  # 0.20
        (Z1, A, SPOT),  # 0.30
        (Z2, A, SPOT),  # cheapest, but UnderStock
    ]


def test_lowest_price_ranks_by_price_alone_and_capacity_optimized_ignores_it() -> None:
    cheapest = wants(stock=PRICED, strategy=PlacementStrategy.LOWEST_PRICE)
    assert candidates(cheapest, SPOT) == [
        (Z2, A, SPOT),
        (Z1, B, SPOT),
        (Z2, B, SPOT),
        (Z1, A, SPOT),
    ]
    capacity = wants(stock=PRICED, strategy=PlacementStrategy.CAPACITY_OPTIMIZED)
    assert candidates(capacity, SPOT) == [
        (Z1, A, SPOT),
        (Z1, B, SPOT),
        (Z2, B, SPOT),
        (Z2, A, SPOT),
    ]


def test_offerings_priced_above_the_max_price_are_never_candidates() -> None:
    for strategy in PlacementStrategy:
        w = wants(stock=PRICED, strategy=strategy, max_price=0.15)
        assert set(candidates(w, SPOT)) == {(Z2, A, SPOT), (Z1, B, SPOT)}
    # A price equal to the max is still paid; an unknown price is left to the cloud.
    w = wants(
        stock=priced((Z1, A, "EnoughStock", 0.15), (Z2, A, "EnoughStock", None)), max_price=0.15
    )
    assert candidates(w, SPOT)[:2] == [(Z1, A, SPOT), (Z2, A, SPOT)]  # known price first


def test_a_pool_goes_to_the_cheapest_zone_and_moves_when_it_passes_the_max_price() -> None:
    cheap = priced((Z1, A, "EnoughStock", 0.10), (Z2, A, "EnoughStock", 0.20))
    w = wants(types=[A], stock=cheap, max_price=0.30)
    assert place(w, {}, [0, 1]) == {0: Slot(Z1, A, SPOT), 1: Slot(Z1, A, SPOT)}

    dear = priced((Z1, A, "EnoughStock", 0.40), (Z2, A, "EnoughStock", 0.20))
    w = wants(types=[A], stock=dear, max_price=0.30)
    assert place(w, {}, [0, 1]) == {0: Slot(Z2, A, SPOT), 1: Slot(Z2, A, SPOT)}


def test_equal_prices_still_spread_over_zones() -> None:
    same = priced((Z1, A, "EnoughStock", 0.10), (Z2, A, "EnoughStock", 0.10))
    placed = place(wants(types=[A], stock=same), {}, [0, 1])
    assert sorted(s.zone for s in placed.values()) == [Z1, Z2]


def test_every_spot_offering_too_dear_falls_back_on_demand_or_has_no_capacity() -> None:
    dear = priced((Z1, A, "EnoughStock", 0.40), (Z2, A, "EnoughStock", 0.50))
    with pytest.raises(NoCapacity, match=r"priced above 0\.3"):
        place(wants(types=[A], stock=dear, max_price=0.30), {}, [0])
    w = wants(types=[A], stock=dear, max_price=0.30, max_on_demand=1)
    assert place(w, {}, [0]) == {0: Slot(Z1, A, ON_DEMAND)}
    assert not spot_sells_well(w)
