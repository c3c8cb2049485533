"""Spot prices that move: the admin route and `spotpool emulator price` set a zone x type's
price, DescribeZoneInstanceConfigInfos reports it, and a price above an instance's MaxPrice
reclaims the instance; the drift and the initial table (pure)."""

import json
from pathlib import Path
from typing import Any

import pytest
from tencentcloud.cvm.v20170312 import models
from typer.testing import CliRunner

from spotpool.emulator.catalog import INSTANCE_TYPES
from spotpool.emulator.cli import app
from spotpool.emulator.prices import (
    PRICE_CEILING,
    PRICE_FLOOR,
    SpotPrices,
    default_spot_price,
    on_demand_price,
)
from tests.emulator.harness import INSTANCE_TYPE, OTHER_ZONE, ZONE, EmulatorProcess, run_spot


def spot_prices(client: Any) -> dict[str, float]:
    request = models.DescribeZoneInstanceConfigInfosRequest()
    request.from_json_string(
        json.dumps(
            {
                "Filters": [
                    {"Name": "instance-charge-type", "Values": ["SPOTPAID"]},
                    {"Name": "zone", "Values": [ZONE, OTHER_ZONE]},
                    {"Name": "instance-type", "Values": [INSTANCE_TYPE]},
                ]
            }
        )
    )
    reply = client.DescribeZoneInstanceConfigInfos(request)
    return {i.Zone: i.Price.UnitPriceDiscount for i in reply.InstanceTypeQuotaSet}


@pytest.mark.integration
def test_a_price_above_the_max_price_reclaims_and_the_api_reports_it(
    emulator: EmulatorProcess,
) -> None:
    client = emulator.cvm()
    default = default_spot_price(INSTANCE_TYPE)
    assert spot_prices(client) == {ZONE: default, OTHER_ZONE: default}
    (instance,) = run_spot(client, count=1, zone=ZONE)  # MaxPrice 1.5

    below = emulator.admin_ok(
        "POST", "/_emulator/prices", {"Zone": ZONE, "InstanceType": INSTANCE_TYPE, "Price": 1.5}
    )
    assert below["Reclaimed"] == []  # a price equal to the max price is still paid
    assert spot_prices(client) == {ZONE: 1.5, OTHER_ZONE: default}

    result = CliRunner().invoke(
        app,
        ["price", "--endpoint", emulator.endpoint, "--zone", ZONE,
         "--instance-type", INSTANCE_TYPE, "--price", "1.6"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.output.split() == [instance]
    assert spot_prices(client) == {ZONE: 1.6, OTHER_ZONE: default}
    listed = emulator.admin_ok("GET", "/_emulator/prices")["Prices"]
    assert listed == [{"Zone": ZONE, "InstanceType": INSTANCE_TYPE, "Price": 1.6}]
    again = emulator.admin_ok(
        "POST", "/_emulator/prices", {"Zone": ZONE, "InstanceType": INSTANCE_TYPE, "Price": 2.0}
    )
    assert again["Reclaimed"] == []  # already on its way out: reclaimed once
    (record,) = [i for i in emulator.all_instances() if i["InstanceId"] == instance]
    assert record["SpotTerminationTime"] is not None  # the notice, then the cloud takes it
    assert record["GoneReason"] in (None, "reclaimed")

    status, reply = emulator.admin(
        "POST", "/_emulator/prices", {"Zone": "xx-nowhere-1", "InstanceType": INSTANCE_TYPE,
                                      "Price": 1.0}
    )  # fmt: skip
    assert status == 400 and "unknown zone" in reply["Error"]


@pytest.mark.unit
def test_drift_moves_every_price_within_its_bounds_and_an_initial_table_loads(
    tmp_path: Path,
) -> None:
    prices = SpotPrices(drift=0.5, seed=7)
    kind = INSTANCE_TYPES[INSTANCE_TYPE]
    seen = set()
    for _ in range(50):
        prices.step()
        now = prices.price(ZONE, INSTANCE_TYPE)
        seen.add(now)
        low = PRICE_FLOOR * on_demand_price(kind)
        high = PRICE_CEILING * on_demand_price(kind)
        assert low - 1e-4 <= now <= high + 1e-4
    assert len(seen) > 10  # it moves

    table = tmp_path / "prices.json"
    table.write_text(json.dumps([{"Zone": ZONE, "InstanceType": INSTANCE_TYPE, "Price": 0.3}]))
    loaded = SpotPrices()
    loaded.load(table)
    assert loaded.price(ZONE, INSTANCE_TYPE) == 0.3
    assert loaded.price(OTHER_ZONE, INSTANCE_TYPE) == default_spot_price(INSTANCE_TYPE)
    table.write_text(json.dumps([{"Zone": ZONE, "InstanceType": "NO.SUCH", "Price": 0.3}]))
    with pytest.raises(ValueError, match="unknown instance type"):
        SpotPrices().load(table)
