"""Learned interruption rates (pure): decay, the merge of several writers, expected cost, and
how placement ranks offerings by them (lowestInterruptionCost)."""

import pytest

from spotpool.api.interruptions import (
    PRIOR_HOURS,
    Learned,
    Tally,
    decode_key,
    encode_key,
    expected_cost,
    summed,
)
from spotpool.api.placement import Avoided, Key, Offering, Slot, Wants, candidates, place
from spotpool.api.placement_report import report
from spotpool.api.spec import ChargeType, PlacementStrategy, SpotpoolSpec

pytestmark = pytest.mark.unit

SPOT = ChargeType.SPOTPAID
HOUR = 3600.0
A_ZONE, B_ZONE, KIND = "ap-x-1", "ap-x-2", "GN7.2XLARGE32"
KEY = ("acct", "ap-x", A_ZONE, KIND)


def test_a_tally_halves_every_half_life_and_never_decays_backwards() -> None:
    tally = Tally(interruptions=8, hours=4, at=0)

    assert tally.decayed(HOUR, HOUR) == Tally(interruptions=4, hours=2, at=HOUR)
    assert tally.decayed(3 * HOUR, HOUR).interruptions == pytest.approx(1)
    assert tally.decayed(-5, HOUR) == tally  # a clock behind the stored moment: unchanged


def test_adding_decays_the_old_counts_first() -> None:
    tally = Tally(interruptions=2, hours=10, at=0).plus(1, 1, HOUR, HOUR)

    assert (tally.interruptions, tally.hours, tally.at) == (2.0, 6.0, HOUR)


def test_the_rate_is_interruptions_per_instance_hour_with_a_calm_prior() -> None:
    assert Learned(0, 0).rate == 0
    assert Learned(1, 0).rate == pytest.approx(1 / PRIOR_HOURS)  # one reclaim, no hours yet
    assert Learned(10, 99).rate == pytest.approx(10 / (99 + PRIOR_HOURS))


def test_writers_are_summed_so_concurrent_replicas_lose_no_count() -> None:
    one = {KEY: Tally(interruptions=3, hours=10, at=0)}
    two = {KEY: Tally(interruptions=1, hours=30, at=HOUR)}  # written later, decayed to then

    learned = summed([one, two], HOUR, HOUR)[KEY]

    assert learned.interruptions == pytest.approx(1.5 + 1)
    assert learned.hours == pytest.approx(5 + 30)


def test_keys_round_trip_and_bad_ones_are_refused() -> None:
    assert decode_key(encode_key(KEY)) == KEY
    assert decode_key("a/b/c") is None
    assert decode_key("a//c/d") is None


def test_expected_cost_pays_each_interruption_s_lost_hours_again() -> None:
    assert expected_cost(1.0, 0.0, 1.0) == 1.0
    assert expected_cost(0.6, 2.0, 1.0) == pytest.approx(1.8)  # cheap but reclaimed twice an hour


def _stock(price_a: float, price_b: float) -> dict[Key, Offering]:
    rows = [(A_ZONE, price_a), (B_ZONE, price_b)]
    offers = [Offering.from_api(z, KIND, "SPOTPAID", "SELL", "EnoughStock", p) for z, p in rows]
    return {o.key: o for o in offers}


def _wants(learned: dict[tuple[str, str], Learned], **changes: object) -> Wants:
    base: dict[str, object] = {
        "zones": [A_ZONE, B_ZONE],
        "types": [KIND],
        "stock": _stock(0.6, 1.0),
        "strategy": PlacementStrategy.LOWEST_INTERRUPTION_COST,
        "learned": learned,
        "interruption_cost_hours": 1.0,
    }
    return Wants(**{**base, **changes})  # type: ignore[arg-type]


def test_with_nothing_learned_the_cheaper_zone_wins() -> None:
    assert candidates(_wants({}), SPOT)[0] == (A_ZONE, KIND, SPOT)


def test_a_cheap_zone_that_keeps_reclaiming_loses_to_a_dearer_calm_one() -> None:
    learned = {(A_ZONE, KIND): Learned(20, 9), (B_ZONE, KIND): Learned(1, 9)}  # 2/h vs 0.1/h

    assert candidates(_wants(learned), SPOT)[0] == (B_ZONE, KIND, SPOT)
    # price alone still picks the cheap one; so does a pool whose interruptions cost nothing
    price_only = _wants(learned, strategy=PlacementStrategy.LOWEST_PRICE)
    assert candidates(price_only, SPOT)[0] == (A_ZONE, KIND, SPOT)
    assert candidates(_wants(learned, interruption_cost_hours=0.0), SPOT)[0][0] == A_ZONE


def test_a_rarely_reclaimed_cheap_zone_still_wins() -> None:
    learned = {(A_ZONE, KIND): Learned(1, 9)}  # 0.1/h: 0.6 x 1.1 < 1.0

    assert candidates(_wants(learned), SPOT)[0] == (A_ZONE, KIND, SPOT)


def test_learned_rates_do_not_override_stock_sold_out_or_avoidance() -> None:
    learned = {(A_ZONE, KIND): Learned(20, 9)}
    sold_out = _stock(0.6, 1.0)
    sold_out[(B_ZONE, KIND, SPOT)] = Offering.from_api(B_ZONE, KIND, "SPOTPAID", "SOLD_OUT", None)
    assert candidates(_wants(learned, stock=sold_out), SPOT) == [(A_ZONE, KIND, SPOT)]

    avoided = _wants(learned, avoided=Avoided(soft=frozenset({(B_ZONE, KIND, SPOT)})))
    assert candidates(avoided, SPOT)[0] == (A_ZONE, KIND, SPOT)


def test_live_instances_stay_and_the_report_says_why() -> None:
    learned = {(A_ZONE, KIND): Learned(20, 9)}
    w = _wants(learned)
    live = {0: Slot(A_ZONE, KIND, SPOT)}

    placed = place(w, live, [1])
    status = report(w, {**live, **placed}, now=__import__("datetime").datetime(2026, 1, 1))

    assert placed == {1: Slot(B_ZONE, KIND, SPOT)}
    assert [(o.zone, o.instances) for o in status.offerings] == [(B_ZONE, 1), (A_ZONE, 1)]
    assert status.offerings[1].interruption_rate == pytest.approx(2.0)
    assert status.offerings[1].score == pytest.approx(0.6 * 3)
    assert status.message.startswith(f"new slots go to {B_ZONE} {KIND}")
    assert "stay where they were placed" in status.message


def test_the_spec_defaults_to_the_learned_strategy_with_an_hour_per_interruption() -> None:
    spec = SpotpoolSpec.model_validate(
        {
            "region": "ap-x",
            "availabilityZone": A_ZONE,
            "instanceType": KIND,
            "imageId": "img-1",
            "minimum": 1,
            "maximum": 2,
            "credentialsSecretRef": {"name": "tc"},
        }
    )
    assert spec.placement_strategy is PlacementStrategy.LOWEST_INTERRUPTION_COST
    assert spec.interruption_cost_hours == 1.0
    with pytest.raises(ValueError):
        SpotpoolSpec.model_validate({**spec.model_dump(by_alias=True), "interruptionCostHours": -1})
