"""Limits reserved before the launch (spotpool.api.ledger), pure: a pool held at a namespace's
limits without losing an instance, from what the other pools reserved (retained ones too, and
pools with no entry yet); each instance priced at the dearest quote of its spec (on-demand
where it may run on demand) and counted in GPUs from the cloud's data, and held where either is
not known."""

from typing import Any

import pytest

from spotpool.api.access import Access, AccessPolicySpec, Limits, NamedPolicy, Use
from spotpool.api.ledger import Ask, Unit, grant, reservation, taken, unit_of, widest
from spotpool.api.reservations import Reservation, reserved
from spotpool.api.spec import SpotpoolSpec
from spotpool.api.status import Instance

pytestmark = pytest.mark.unit
Z1, Z2 = "ap-singapore-1", "ap-singapore-2"


def ask(want: int, floor: int = 0, gpus: int | None = 0, cost: float | None = 0.0) -> Ask:
    gpus_unknown = "no GPU count for X" if gpus is None else ""
    unit = Unit(gpus, cost, gpus_unknown, "no price for X" if cost is None else "")
    return Ask("t", "uid-me", "me", want, floor, unit)


def spec(**fields: Any) -> SpotpoolSpec:
    base = {"region": "ap-singapore", "availabilityZones": [Z1, Z2], "subnetId": "DEFAULT",
            "instanceTypes": ["S5.MEDIUM4", "GN7.2XLARGE32"], "minimum": 1, "maximum": 9,
            "imageId": "img-eb30mz89", "credentialsSecretRef": {"name": "keys"}}  # fmt: skip
    return SpotpoolSpec.model_validate({**base, **fields})


def test_a_pool_is_held_at_the_limit_and_keeps_what_it_runs() -> None:
    limits = Limits(instances=3, gpus=8, hourly_cost=10)
    # other pools take 2 of 3 instances: this one may have 1
    held = grant("t", limits, ask(4), Use(instances=2))
    assert held.count == 1 and "held at 1 of 4" in held.message
    assert "SpotpoolAccessPolicy t limits namespace t to 3 instances" in held.message
    # the limit lowered below what it runs: it keeps its instances, and gets no more
    assert grant("t", limits, ask(4, floor=3), Use(instances=2)).count == 3
    # GPUs: 4 a piece, 8 in all, none taken: 2; cost: 3 an hour each, 10 in all, 4 taken: 2
    assert grant("t", limits, ask(3, gpus=4), Use()).count == 2
    assert grant("t", limits, ask(3, cost=3.0), Use(hourly_cost=4)).count == 2
    # within every limit: all of it, no message
    assert grant("t", limits, ask(2, gpus=1, cost=1.0), Use()).count == 2
    assert grant("t", limits, ask(2, gpus=1, cost=1.0), Use()).message == ""
    # a limit met exactly is met, whatever the float sums say
    assert grant("t", Limits(hourly_cost=0.3), ask(5, cost=0.1), Use()).count == 3


def test_an_unknown_price_or_gpu_count_holds_growth_under_the_limit_that_needs_it() -> None:
    cost = grant("t", Limits(hourly_cost=100), ask(4, floor=1, cost=None), Use())
    assert cost.count == 1 and "no price for X: no growth until it does" in cost.message
    gpus = grant("t", Limits(gpus=100), ask(4, gpus=None), Use())
    assert gpus.count == 0 and "no GPU count for X" in gpus.message
    # an instance limit alone needs neither figure
    assert grant("t", Limits(instances=9), ask(4, gpus=None, cost=None), Use()).count == 4


def test_a_launch_is_priced_at_the_dearest_quote_of_its_spec_on_demand_where_it_may_be() -> None:
    quotes = {(z, t): (0.1 if t == "S5.MEDIUM4" else 0.5, 2.5) for z in (Z1, Z2)
              for t in ("S5.MEDIUM4", "GN7.2XLARGE32")}  # fmt: skip
    gpus = {"S5.MEDIUM4": 0, "GN7.2XLARGE32": 1}
    assert unit_of(spec(), [], quotes, gpus) == Unit(1, 0.5)
    fallback = spec(onDemandFallback={"enabled": True})
    assert unit_of(fallback, [], quotes, gpus).cost == 2.5
    assert unit_of(spec(instanceChargeType="POSTPAID_BY_HOUR"), [], quotes, gpus).cost == 2.5
    # a running instance dearer than the spec's quotes (another type, before a change) counts
    running = [Instance(instance_id="ins-1", instance_type="GT4.4XLARGE96", price=9.0)]
    unit = unit_of(spec(), running, quotes, {**gpus, "GT4.4XLARGE96": 8})
    assert unit == Unit(8, 9.0)
    # one zone x type the cloud does not price: the price is not known
    missing = dict(quotes)
    del missing[(Z2, "GN7.2XLARGE32")]
    unit = unit_of(spec(), [], missing, gpus)
    assert unit.cost is None and unit.cost_unknown == (
        f"the cloud gives no price for GN7.2XLARGE32 in {Z2}"
    )
    # a type the cloud gives no GPU count for: not known (no table to guess from)
    unit = unit_of(spec(instanceTypes=["PNV4.7XLARGE116"]), [], {}, gpus)
    assert unit.gpus is None and "PNV4.7XLARGE116" in unit.gpus_unknown


def test_the_others_are_their_entries_retained_ones_too_and_pools_with_none_yet() -> None:
    entries = {
        "uid-a": Reservation(namespace="t", pool="a", instances=3, gpus=3, hourly_cost=1.5),
        "uid-old": Reservation(namespace="t", pool="old", instances=2, retained=True),
        "uid-me": Reservation(namespace="t", pool="me", instances=5),
        "uid-x": Reservation(namespace="x", pool="x", instances=40),
    }
    unledgered = {"uid-a": Use(9), "uid-new": Use(1, 1, 0.5), "uid-me": Use(7)}
    assert taken(entries, "t", "uid-me", unledgered) == Use(6, 4, 2.0)
    assert reserved(entries).instances == 50


def test_an_entry_is_the_count_at_the_units_figures_and_only_grows_before_a_run() -> None:
    wanted = ask(4, floor=2, gpus=2, cost=0.5)
    entry = reservation(wanted, 3)
    assert (entry.instances, entry.gpus, entry.hourly_cost) == (3, 6, 1.5)
    assert reservation(wanted, 1).instances == 2  # never below what it holds
    before = Reservation(namespace="t", pool="me", instances=5, gpus=1, hourly_cost=9.0)
    grown = widest(entry, before)
    assert (grown.instances, grown.gpus, grown.hourly_cost) == (5, 6, 9.0)
    # a figure not known keeps what the entry said
    unknown = reservation(ask(4, cost=None, gpus=None), 4, before)
    assert (unknown.instances, unknown.gpus, unknown.hourly_cost) == (4, 1, 9.0)


def test_a_policy_not_understood_refuses_every_pool_it_may_select() -> None:
    spec_ = AccessPolicySpec.model_validate({"namespaces": {"selector": {}}})
    odd = NamedPolicy("newer", spec_, "spec.grants: Extra inputs are not permitted")
    refused = Access.of("t", {}, [odd]).not_understood()
    assert refused is not None and refused.reason == "PolicyNotUnderstood"
    assert "SpotpoolAccessPolicy newer" in refused.message
    assert Access.of("t", {}, [NamedPolicy("fine", spec_)]).not_understood() is None
