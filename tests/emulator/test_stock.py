"""DescribeZoneInstanceConfigInfos through the official SDK: stock per type and zone from the
capacity table, in the real response shape; and the request log the rate-limit tests read."""

import json
from typing import Any

import pytest
from tencentcloud.cvm.v20170312 import models

from tests.emulator.harness import (
    INSTANCE_TYPE,
    OTHER_ZONE,
    ZONE,
    EmulatorProcess,
    error_code,
    run_spot,
)

pytestmark = pytest.mark.integration


def offerings(client: Any, **filters: list[str]) -> list[models.InstanceTypeQuotaItem]:
    request = models.DescribeZoneInstanceConfigInfosRequest()
    request.from_json_string(
        json.dumps({"Filters": [{"Name": k, "Values": v} for k, v in filters.items()]})
    )
    return list(client.DescribeZoneInstanceConfigInfos(request).InstanceTypeQuotaSet)


def test_spot_stock_per_type_and_zone_follows_the_capacity_table(
    emulator: EmulatorProcess,
) -> None:
    client = emulator.cvm()
    capacity = {"InstanceType": INSTANCE_TYPE}
    emulator.admin_ok("POST", "/_emulator/capacity", {**capacity, "Zone": ZONE, "Available": 0})
    emulator.admin_ok(
        "POST", "/_emulator/capacity", {**capacity, "Zone": OTHER_ZONE, "Available": 2}
    )
    spot = {
        (i.Zone, i.InstanceType): i
        for i in offerings(
            client,
            **{
                "instance-charge-type": ["SPOTPAID"],
                "zone": [ZONE, OTHER_ZONE],
                "instance-type": [INSTANCE_TYPE, "S5.LARGE8"],
            },
        )
    }

    assert set(spot) == {(z, t) for z in (ZONE, OTHER_ZONE) for t in (INSTANCE_TYPE, "S5.LARGE8")}
    sold_out = spot[(ZONE, INSTANCE_TYPE)]
    assert (sold_out.Status, sold_out.StatusCategory) == ("SOLD_OUT", "WithoutStock")
    assert sold_out.SoldOutReason
    assert sold_out.InstanceChargeType == "SPOTPAID"
    low = spot[(OTHER_ZONE, INSTANCE_TYPE)]
    assert (low.Status, low.StatusCategory) == ("SELL", "UnderStock")
    plenty = spot[(ZONE, "S5.LARGE8")]
    assert (plenty.Status, plenty.StatusCategory) == ("SELL", "EnoughStock")
    assert plenty.Cpu == 4 and plenty.Memory == 8 and plenty.InstanceFamily == "S5"
    assert plenty.Price.ChargeUnit == "HOUR"
    assert 0 < plenty.Price.UnitPriceDiscount < plenty.Price.UnitPrice

    # Taking stock moves the category; on-demand always sells.
    run_spot(client, count=1, zone=OTHER_ZONE)
    (after,) = offerings(
        client,
        **{
            "instance-charge-type": ["SPOTPAID"],
            "zone": [OTHER_ZONE],
            "instance-type": [INSTANCE_TYPE],
        },
    )
    assert after.StatusCategory == "UnderStock"
    emulator.admin_ok(
        "POST", "/_emulator/capacity", {**capacity, "Zone": OTHER_ZONE, "Available": 5}
    )
    (normal,) = offerings(
        client,
        **{
            "instance-charge-type": ["SPOTPAID"],
            "zone": [OTHER_ZONE],
            "instance-type": [INSTANCE_TYPE],
        },
    )
    assert normal.StatusCategory == "NormalStock"
    (on_demand,) = offerings(
        client,
        **{
            "instance-charge-type": ["POSTPAID_BY_HOUR"],
            "zone": [ZONE],
            "instance-type": [INSTANCE_TYPE],
        },
    )
    assert (on_demand.Status, on_demand.StatusCategory) == ("SELL", "EnoughStock")
    assert on_demand.Price.UnitPriceDiscount == on_demand.Price.UnitPrice


def test_unknown_stock_filter_is_invalid_filter(emulator: EmulatorProcess) -> None:
    code = error_code(lambda: offerings(emulator.cvm(), **{"gpu": ["1"]}))

    assert code == "InvalidFilter"


def test_request_log_lists_each_call_with_its_arrival_and_client(
    emulator: EmulatorProcess,
) -> None:
    client = emulator.cvm()
    offerings(client, zone=[ZONE])
    emulator.admin_ok(
        "POST",
        "/_emulator/faults",
        {"Action": "DescribeZoneInstanceConfigInfos", "Code": "RequestLimitExceeded"},
    )
    assert error_code(lambda: offerings(client, zone=[ZONE])) == "RequestLimitExceeded"

    calls = emulator.admin_ok("GET", "/_emulator/requests?action=DescribeZoneInstanceConfigInfos")
    assert [c["Code"] for c in calls["Requests"]] == ["OK", "RequestLimitExceeded"]
    first, second = calls["Requests"]
    assert first["Time"] <= second["Time"]
    assert first["Service"] == "cvm" and first["Client"].startswith("SDK_PYTHON")
