"""What a pool costs: instance prices from the cloud's price list (spot, or on-demand for an
on-demand fallback), the pool's hourly cost beside its on-demand cost, the cached price look-up
(one call per TTL per account and region, failures tolerated) and the cost metrics."""

import json
from typing import Any

import pytest
from pydantic import SecretStr
from spotpool_operator.cloud.cost import PriceBook, Quote, priced, savings
from spotpool_operator.reporting.metrics import Metrics
from tencentcloud.cvm.v20170312 import models

from spotpool.api.placement import Key, Offering, Stock
from spotpool.api.spec import ChargeType
from spotpool.api.status import Instance, SpotpoolStatus
from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.prices import hourly_prices

pytestmark = pytest.mark.unit

SPOT, ON_DEMAND = ChargeType.SPOTPAID, ChargeType.POSTPAID_BY_HOUR
Z1, Z2 = "ap-singapore-2", "ap-singapore-3"
GPU, CPU = "GN7.2XLARGE32", "S5.LARGE8"
KEYS = Credentials(secret_id=SecretStr("AKIDcost"), secret_key=SecretStr("k"))
SPEC = {"region": "ap-singapore", "instanceChargeType": "SPOTPAID"}
QUOTES: dict[tuple[str, str], Quote] = {
    (Z1, GPU): (0.444, 2.22),
    (Z2, GPU): (0.5, 2.22),
    (Z1, CPU): (0.0576, 0.288),
}


def instance(n: int, zone: str = Z1, kind: str = GPU, charge: ChargeType | None = SPOT) -> Instance:
    return Instance(
        instance_id=f"ins-{n}", slot=n, zone=zone, instance_type=kind, state="RUNNING",
        charge_type=charge,
    )  # fmt: skip


def pool(*instances: Instance) -> SpotpoolStatus:
    return SpotpoolStatus(instances=list(instances), size=len(instances))


def test_spot_instances_cost_the_spot_price_and_the_comparison_is_on_demand() -> None:
    status = priced(pool(instance(0), instance(1, Z2)), QUOTES, SPOT)
    assert [i.price for i in status.instances] == [0.444, 0.5]
    assert status.hourly_cost == 0.944
    assert status.on_demand_hourly_cost == 4.44
    assert savings(status) == 3.496


def test_an_on_demand_fallback_costs_the_on_demand_price_and_saves_nothing() -> None:
    status = priced(pool(instance(0), instance(1, Z2, charge=ON_DEMAND)), QUOTES, SPOT)
    assert [i.price for i in status.instances] == [0.444, 2.22]
    assert status.hourly_cost == 2.664
    assert status.on_demand_hourly_cost == 4.44
    assert savings(status) == 1.776
    # an instance with no recorded charge type is charged as the pool is
    on_demand_pool = priced(pool(instance(0, charge=None)), QUOTES, ON_DEMAND)
    assert on_demand_pool.hourly_cost == on_demand_pool.on_demand_hourly_cost == 2.22
    assert savings(on_demand_pool) == 0


def test_mixed_types_add_up_and_an_empty_pool_costs_nothing() -> None:
    status = priced(pool(instance(0), instance(1, kind=CPU), instance(2, kind=CPU)), QUOTES, SPOT)
    assert status.hourly_cost == pytest.approx(0.444 + 2 * 0.0576)
    assert status.on_demand_hourly_cost == pytest.approx(2.22 + 2 * 0.288)
    empty = priced(pool(), QUOTES, SPOT)
    assert (empty.hourly_cost, empty.on_demand_hourly_cost, savings(empty)) == (0, 0, 0)


def test_an_unknown_price_keeps_the_earlier_one_or_leaves_the_cost_unset() -> None:
    before = priced(pool(instance(0), instance(1)), QUOTES, SPOT)
    # no quote for Z1 x GPU now (a failed look-up): each instance keeps its earlier price
    now = priced(pool(instance(0), instance(1), instance(2)), {}, SPOT, before)
    assert [i.price for i in now.instances] == [0.444, 0.444, None]
    assert now.hourly_cost is None and now.on_demand_hourly_cost is None
    assert savings(now) is None


class Lister:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str], list[str]]] = []
        self.fail = False

    def __call__(
        self, credentials: Credentials, region: str, zones: list[str], types: list[str]
    ) -> dict[tuple[str, str], Quote]:
        self.calls.append((region, zones, types))
        if self.fail:
            raise RuntimeError("RequestLimitExceeded")
        return {p: q for p, q in QUOTES.items() if p[0] in zones and p[1] in types}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_prices_are_looked_up_once_per_ttl_and_shared_by_pools_of_an_account() -> None:
    lister, clock = Lister(), Clock()
    book = PriceBook(lister, ttl=60, clock=clock)
    first = book.price(pool(instance(0), instance(1, Z2)), KEYS, SPEC)
    assert first.hourly_cost == 0.944
    assert lister.calls == [("ap-singapore", [Z1, Z2], [GPU])]
    # another pool of the account, and the same pool again, within the TTL: no call
    assert book.price(pool(instance(5)), KEYS, SPEC).hourly_cost == 0.444
    assert book.price(pool(instance(0), instance(1, Z2)), KEYS, SPEC).hourly_cost == 0.944
    assert len(lister.calls) == book.lookups == 1
    # a zone x type not held yet: one call, which renews the pairs held too
    book.price(pool(instance(0), instance(1, kind=CPU)), KEYS, SPEC)
    assert lister.calls[-1] == ("ap-singapore", [Z1, Z2], [GPU, CPU])
    clock.now += 61  # stale: asked again, once for every pool of the account
    book.price(pool(instance(0)), KEYS, SPEC)
    assert lister.calls[-1] == ("ap-singapore", [Z1, Z2], [GPU, CPU])
    book.price(pool(instance(1, Z2)), KEYS, SPEC)
    book.price(pool(instance(2, kind=CPU)), KEYS, SPEC)
    assert len(lister.calls) == 3
    # another region or key pair is priced apart
    book.price(pool(instance(0)), KEYS, {**SPEC, "region": "ap-tokyo"})
    assert lister.calls[-1] == ("ap-tokyo", [Z1], [GPU]) and len(lister.calls) == 4


def test_a_failed_look_up_serves_the_prices_held_and_is_not_retried_at_once() -> None:
    lister, clock = Lister(), Clock()
    book = PriceBook(lister, ttl=10, clock=clock)
    book.price(pool(instance(0)), KEYS, SPEC)
    clock.now += 11
    lister.fail = True
    assert book.price(pool(instance(0)), KEYS, SPEC).hourly_cost == 0.444  # stale, still served
    assert book.price(pool(instance(0)), KEYS, SPEC).hourly_cost == 0.444
    assert len(lister.calls) == 2  # the second write waited for the retry time
    # nothing held for Z2 and the cloud failing: no cost rather than a wrong one
    assert book.price(pool(instance(0), instance(1, Z2)), KEYS, SPEC).hourly_cost is None


def test_no_credentials_or_no_region_prices_nothing_and_calls_nothing() -> None:
    lister = Lister()
    book = PriceBook(lister)
    assert book.price(pool(instance(0)), None, SPEC).hourly_cost is None
    assert book.price(pool(instance(0)), KEYS, {}).hourly_cost is None
    assert lister.calls == []


class FakeCvm:
    """A CVM client answering DescribeZoneInstanceConfigInfos with items in the API's shape."""

    region = "ap-singapore"

    class credential:
        secretId = "AKIDfake"

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.requests: list[dict[str, Any]] = []

    def DescribeZoneInstanceConfigInfos(self, request: Any) -> Any:
        self.requests.append(json.loads(request.to_json_string()))
        reply = models.DescribeZoneInstanceConfigInfosResponse()
        reply._deserialize({"InstanceTypeQuotaSet": self.items})
        return reply


def _item(zone: str, charge: str, unit: float, discounted: float) -> dict[str, Any]:
    price = {"UnitPrice": unit, "UnitPriceDiscount": discounted, "ChargeUnit": "HOUR"}
    return {"Zone": zone, "InstanceType": GPU, "InstanceChargeType": charge, "Status": "SELL",
            "Price": price}  # fmt: skip


def test_prices_come_from_one_describe_call_spot_discounted_on_demand_as_paid() -> None:
    client = FakeCvm([
        _item(Z1, "SPOTPAID", 2.22, 0.444),
        _item(Z1, "POSTPAID_BY_HOUR", 2.22, 2.0),  # an account discount on demand
        _item(Z2, "SPOTPAID", 2.22, 0.5),  # no on-demand offering listed: its UnitPrice
    ])  # fmt: skip
    found = hourly_prices(client, [Z2, Z1], [GPU])
    assert found == {(Z1, GPU): (0.444, 2.0), (Z2, GPU): (0.5, 2.22)}
    (request,) = client.requests
    filters = {f["Name"]: f["Values"] for f in request["Filters"]}
    assert filters == {
        "zone": [Z1, Z2], "instance-type": [GPU],
        "instance-charge-type": ["POSTPAID_BY_HOUR", "SPOTPAID"],
    }  # fmt: skip


def test_the_cost_metrics_follow_the_status_and_go_when_unknown_or_forgotten() -> None:
    metrics = Metrics()
    status = priced(pool(instance(0), instance(1, Z2, charge=ON_DEMAND)), QUOTES, SPOT)
    metrics.observe_pool("team-a", "gpu", status)
    labels = {"namespace": "team-a", "pool": "gpu"}
    sample = metrics.registry.get_sample_value
    assert sample("spotpool_pool_hourly_cost", labels) == 2.664
    assert sample("spotpool_pool_hourly_savings", labels) == 1.776
    metrics.observe_pool("team-a", "gpu", status.model_copy(update={"hourly_cost": None}))
    assert sample("spotpool_pool_hourly_cost", labels) is None
    assert sample("spotpool_pool_hourly_savings", labels) is None
    metrics.observe_pool("team-a", "gpu", status)
    metrics.forget_pool("team-a", "gpu")
    assert sample("spotpool_pool_hourly_cost", labels) is None


def test_placements_stock_look_up_prices_the_pools_it_covers_without_a_price_call() -> None:
    lister = Lister()
    book = PriceBook(lister, ttl=60)

    def stock(
        credentials: Credentials,
        region: str,
        zones: list[str],
        types: list[str],
        charges: list[ChargeType],
    ) -> dict[Key, Offering]:
        return {
            (z, t, c): Offering(z, t, c, True, Stock.ENOUGH, QUOTES[(z, t)][c is ON_DEMAND])
            for z in zones for t in types for c in charges if (z, t) in QUOTES
        }  # fmt: skip

    looked = book.sharing(stock)(KEYS, "ap-singapore", [Z1, Z2], [GPU], [SPOT, ON_DEMAND])
    assert looked[(Z1, GPU, SPOT)].price == 0.444  # placement gets its answer unchanged
    status = book.price(pool(instance(0), instance(1, Z2, charge=ON_DEMAND)), KEYS, SPEC)
    assert (status.hourly_cost, status.on_demand_hourly_cost) == (2.664, 4.44)
    assert lister.calls == []
    # an on-demand pool's look-up (no spot prices) prices nothing: the price call does
    book.sharing(stock)(KEYS, "ap-singapore", [Z1], [CPU], [ON_DEMAND])
    assert book.price(pool(instance(2, kind=CPU)), KEYS, SPEC).hourly_cost == 0.0576
    assert len(lister.calls) == 1
