"""Hourly prices per zone and instance type (DescribeZoneInstanceConfigInfos lists them beside
the stock), read through the same reused clients and token buckets as every other direct call:
what the operator's cost fields (status.hourlyCost, status.onDemandHourlyCost) are made of."""

import json

from tencentcloud.cvm.v20170312 import cvm_client, models

from spotpool.api.spec import ChargeType
from spotpool.engine.tencent.cloud import limited

ACTION = "DescribeZoneInstanceConfigInfos"


def hourly_prices(
    client: cvm_client.CvmClient, zones: list[str], types: list[str]
) -> dict[tuple[str, str], tuple[float | None, float | None]]:
    """(zone, type) -> (spot price, on-demand price) an hour, as the same
    DescribeZoneInstanceConfigInfos lists them (one call): spot is the SPOTPAID offering's
    UnitPriceDiscount; on-demand is the POSTPAID_BY_HOUR offering's UnitPriceDiscount (what
    the account pays), else any offering's UnitPrice. None where the cloud lists no price."""
    request = models.DescribeZoneInstanceConfigInfosRequest()
    request.from_json_string(
        json.dumps(
            {
                "Filters": [
                    {"Name": "zone", "Values": sorted(set(zones))},
                    {"Name": "instance-type", "Values": sorted(set(types))},
                    {"Name": "instance-charge-type", "Values": ["POSTPAID_BY_HOUR", "SPOTPAID"]},
                ]
            }
        )
    )
    reply = limited(client, ACTION, request)
    spot: dict[tuple[str, str], float] = {}
    listed: dict[tuple[str, str], float] = {}
    on_demand: dict[tuple[str, str], float] = {}
    for item in reply.InstanceTypeQuotaSet or []:
        price, key = item.Price, (item.Zone, item.InstanceType)
        if price is None:
            continue
        if price.UnitPrice is not None:
            listed[key] = float(price.UnitPrice)
        if price.UnitPriceDiscount is None:
            continue
        if item.InstanceChargeType == ChargeType.SPOTPAID.value:
            spot[key] = float(price.UnitPriceDiscount)
        elif item.InstanceChargeType == ChargeType.POSTPAID_BY_HOUR.value:
            on_demand[key] = float(price.UnitPriceDiscount)
    return {
        key: (spot.get(key), on_demand.get(key, listed.get(key)))
        for key in {*spot, *listed, *on_demand}
    }


def type_gpus(client: cvm_client.CvmClient, types: list[str]) -> dict[str, int]:
    """type -> GPUs of one instance, as the cloud's own instance-type data says (the `Gpu` of
    DescribeZoneInstanceConfigInfos, one call for the region); a type the cloud does not list
    is left out (its count is not known)."""
    request = models.DescribeZoneInstanceConfigInfosRequest()
    request.from_json_string(
        json.dumps({"Filters": [{"Name": "instance-type", "Values": sorted(set(types))}]})
    )
    reply = limited(client, ACTION, request)
    found: dict[str, int] = {}
    for item in reply.InstanceTypeQuotaSet or []:
        if item.InstanceType and item.Gpu is not None:
            found[item.InstanceType] = max(found.get(item.InstanceType, 0), int(item.Gpu))
    return found
