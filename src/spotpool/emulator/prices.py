"""Spot prices that move: per zone x instance type, the hourly spot price that
DescribeZoneInstanceConfigInfos reports (`Price.UnitPriceDiscount` of the SPOTPAID offering).

Every zone x type starts at SPOT_DISCOUNT percent of its on-demand price, unless an initial
table (`spotpool emulator serve --spot-prices FILE`) or the admin route (`POST
/_emulator/prices`, `spotpool emulator price`) sets it. With `--price-drift F` every price
takes a random step of at most F (a fraction) every `--price-drift-seconds`, kept between
PRICE_FLOOR and PRICE_CEILING of the on-demand price.

As on Tencent Cloud, a spot instance launched with a `SpotOptions.MaxPrice` is reclaimed when
the market price of its zone x type rises above that max price (`over_max_price`).
Prices live in the emulator's memory: a restart starts again from the initial table.
"""

import json
import random
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from spotpool.emulator.catalog import INSTANCE_TYPES, REGIONS, InstanceType, zones
from spotpool.emulator.instances import InstanceRecord

SPOT_DISCOUNT = 20  # spot starts at this percentage of the on-demand price
PRICE_FLOOR, PRICE_CEILING = 0.1, 1.0  # drift keeps a spot price within these of on-demand

Key = tuple[str, str]  # zone, instance type


class SpotPrice(BaseModel):
    """One row of the price table, on the wire (admin route, initial table file)."""

    model_config = ConfigDict(populate_by_name=True)

    zone: str = Field(alias="Zone")
    instance_type: str = Field(alias="InstanceType")
    price: float | None = Field(alias="Price", ge=0)  # None: back to the default


def on_demand_price(kind: InstanceType) -> float:
    """The emulator's list price an hour for an instance type."""
    return round(0.05 * kind.cpu + 0.01 * kind.memory_gb + 1.5 * kind.gpu_count, 4)


def default_spot_price(instance_type: str) -> float:
    return round(on_demand_price(INSTANCE_TYPES[instance_type]) * SPOT_DISCOUNT / 100, 4)


def known(zone: str, instance_type: str) -> str | None:
    """Why (zone, instance_type) cannot be priced, or None when both exist."""
    if not any(zone in zones(region) for region in REGIONS):
        return f"unknown zone {zone}"
    if instance_type not in INSTANCE_TYPES:
        return f"unknown instance type {instance_type}"
    return None


class SpotPrices:
    """The current spot price of every zone x type (defaults unless set or drifted)."""

    def __init__(
        self, drift: float = 0.0, drift_seconds: float = 60.0, seed: int | None = None
    ) -> None:
        self.table: dict[Key, float] = {}
        self.drift = drift
        self.drift_seconds = drift_seconds
        self._random = random.Random(seed)

    def price(self, zone: str, instance_type: str) -> float:
        found = self.table.get((zone, instance_type))
        return default_spot_price(instance_type) if found is None else found

    def set(self, zone: str, instance_type: str, price: float | None) -> None:
        if price is None:
            self.table.pop((zone, instance_type), None)
        else:
            self.table[(zone, instance_type)] = round(price, 4)

    def load(self, path: Path) -> None:
        """An initial table: a JSON list of {Zone, InstanceType, Price}."""
        for row in json.loads(path.read_text()):
            item = SpotPrice.model_validate(row)
            problem = known(item.zone, item.instance_type)
            if problem:
                raise ValueError(f"{path}: {problem}")
            self.set(item.zone, item.instance_type, item.price)

    def rows(self) -> list[dict[str, object]]:
        return [
            {"Zone": zone, "InstanceType": kind, "Price": price}
            for (zone, kind), price in sorted(self.table.items())
        ]

    def step(self) -> None:
        """One drift step: every zone x type's price moves by at most `drift` (a fraction)."""
        if self.drift <= 0:
            return
        for region in REGIONS:
            for zone in zones(region):
                for name, kind in INSTANCE_TYPES.items():
                    list_price = on_demand_price(kind)
                    moved = self.price(zone, name) * (
                        1 + self._random.uniform(-self.drift, self.drift)
                    )
                    low, high = PRICE_FLOOR * list_price, PRICE_CEILING * list_price
                    self.set(zone, name, min(high, max(low, moved)))


def over_max_price(records: Iterable[InstanceRecord], prices: SpotPrices) -> list[InstanceRecord]:
    """Live spot instances whose zone x type now costs more than the MaxPrice they were
    launched with: the cloud takes them back (not yet reclaimed ones only)."""
    doomed = []
    for r in records:
        if not r.spot or r.gone or r.reclaim_at is not None or r.state == "TERMINATING":
            continue
        if r.spot_max_price is None:
            continue
        if prices.price(r.zone, r.instance_type) > float(r.spot_max_price):
            doomed.append(r)
    return doomed
