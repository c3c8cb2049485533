"""The cloud's stock per zone, instance type and charge type (DescribeZoneInstanceConfigInfos),
read through the same reused clients and token buckets as every other direct call."""

import json

from tencentcloud.cvm.v20170312 import cvm_client, models

from spotpool.api.placement import Key, Offering
from spotpool.api.spec import ChargeType
from spotpool.engine.tencent.cloud import limited

ACTION = "DescribeZoneInstanceConfigInfos"


def hourly_price(price: models.ItemPrice | None) -> float | None:
    """What an hour costs after discount: for SPOTPAID, the spot price the market asks now
    (UnitPriceDiscount; the real API also fills it for POSTPAID_BY_HOUR). None: not reported."""
    if price is None:
        return None
    for value in (price.UnitPriceDiscount, price.UnitPrice):
        if value is not None:
            return float(value)
    return None


def offerings(
    client: cvm_client.CvmClient,
    zones: list[str],
    types: list[str],
    charges: list[ChargeType],
) -> dict[Key, Offering]:
    """What each of `zones` sells of `types` for `charges`: one call (≤ 10 zones and 10 types
    a pool, well within the API's 100 values a filter)."""
    request = models.DescribeZoneInstanceConfigInfosRequest()
    request.from_json_string(
        json.dumps(
            {
                "Filters": [
                    {"Name": "zone", "Values": sorted(set(zones))},
                    {"Name": "instance-type", "Values": sorted(set(types))},
                    {"Name": "instance-charge-type", "Values": sorted({c.value for c in charges})},
                ]
            }
        )
    )
    reply = limited(client, ACTION, request)
    found: dict[Key, Offering] = {}
    for item in reply.InstanceTypeQuotaSet or []:
        try:
            offering = Offering.from_api(
                item.Zone, item.InstanceType, item.InstanceChargeType, item.Status,
                item.StatusCategory, hourly_price(item.Price),
            )  # fmt: skip
        except ValueError:  # a charge type we do not sell (PREPAID, CDHPAID…)
            continue
        found[offering.key] = offering
    return found
