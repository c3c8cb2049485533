"""DescribeZoneInstanceConfigInfos: what each zone sells, per instance type and charge type,
with its stock as the capacity table (`/_emulator/capacity`) says.

Spot stock is the table's count for (zone, type): no entry means plenty. The status follows
the real API's words: `SELL` or `SOLD_OUT`, and a `StatusCategory` of `EnoughStock`,
`NormalStock`, `UnderStock` or `WithoutStock`. On-demand (`POSTPAID_BY_HOUR`) always sells.
The SPOTPAID offering's `Price.UnitPriceDiscount` is the zone x type's current spot price
(prices.py: it can move).
"""

from collections.abc import Callable
from typing import Any

from spotpool.emulator import params
from spotpool.emulator.catalog import INSTANCE_TYPES, zones
from spotpool.emulator.errors import ApiError, invalid_value
from spotpool.emulator.prices import SpotPrices, on_demand_price
from spotpool.emulator.world import Context

CHARGE_TYPES = ("POSTPAID_BY_HOUR", "SPOTPAID")
UNDER_STOCK = 3  # fewer left than this: UnderStock
ENOUGH_STOCK = 10  # at least this many left: EnoughStock


def stock_category(available: int | None) -> str:
    """The StatusCategory for `available` instances left (None: no limit)."""
    if available is None or available >= ENOUGH_STOCK:
        return "EnoughStock"
    if available <= 0:
        return "WithoutStock"
    return "UnderStock" if available < UNDER_STOCK else "NormalStock"


def _item(
    zone: str, name: str, charge: str, available: int | None, prices: SpotPrices
) -> dict[str, Any]:
    kind = INSTANCE_TYPES[name]
    category = stock_category(available) if charge == "SPOTPAID" else "EnoughStock"
    sold_out = category == "WithoutStock"
    price = on_demand_price(kind)
    paid = prices.price(zone, name) if charge == "SPOTPAID" else price
    return {
        "Zone": zone,
        "InstanceType": name,
        "InstanceChargeType": charge,
        "NetworkCard": 25,
        "Externals": {},
        "Cpu": kind.cpu,
        "Memory": kind.memory_gb,
        "InstanceFamily": name.split(".", 1)[0],
        "TypeName": name,
        "LocalDiskTypeList": [],
        "Status": "SOLD_OUT" if sold_out else "SELL",
        "Price": {
            "UnitPrice": price,
            "ChargeUnit": "HOUR",
            "UnitPriceDiscount": paid,
            "Discount": round(paid / price * 100, 1) if price else 100.0,
        },
        "SoldOutReason": "spot stock exhausted in this zone" if sold_out else "",
        "InstanceBandwidth": 1.5,
        "InstancePps": 30,
        "StorageBlockAmount": 0,
        "CpuType": "Intel Xeon Cascade Lake 8255C(2.5 GHz/3.1 GHz)",
        "Gpu": int(kind.gpu_count),
        "Fpga": 0,
        "Remark": kind.gpu_type,
        "GpuCount": kind.gpu_count,
        "Frequency": "2.5GHz/3.1GHz",
        "StatusCategory": category,
    }


_FILTERS: dict[str, Callable[[str, str, str], str]] = {
    "zone": lambda zone, name, charge: zone,
    "instance-type": lambda zone, name, charge: name,
    "instance-family": lambda zone, name, charge: name.split(".", 1)[0],
    "instance-charge-type": lambda zone, name, charge: charge,
}


def describe_zone_instance_config_infos(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    p = params.parse(params.DescribeZoneInstanceConfigInfos, body)
    chosen: list[tuple[Callable[[str, str, str], str], frozenset[str]]] = []
    for f in p.filters:
        if f.name == "sort-keys":
            continue  # ordering only; the emulator answers in catalogue order
        getter = _FILTERS.get(f.name)
        if getter is None:
            raise ApiError(
                "InvalidFilter",
                f"The filter `{f.name}` is not supported; use {', '.join(_FILTERS)}, sort-keys.",
            )
        if len(f.values) > 100:
            raise invalid_value("Filters.Values", "at most 100 values a filter.")
        chosen.append((getter, frozenset(f.values)))
    capacity = ctx.world.store.capacity
    items = [
        _item(zone, name, charge, capacity.get((zone, name)), ctx.world.prices)
        for zone in zones(ctx.region)
        for name in INSTANCE_TYPES
        for charge in CHARGE_TYPES
        if all(getter(zone, name, charge) in wanted for getter, wanted in chosen)
    ]
    return {"InstanceTypeQuotaSet": items}
