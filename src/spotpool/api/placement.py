"""Where a new slot goes: a zone, an instance type and a charge type, chosen from the cloud's
stock (DescribeZoneInstanceConfigInfos), pure rules with no I/O.

- Offerings are the spec's zones by instanceTypes. A SOLD_OUT one is never tried; one that
  answered "no stock" a moment ago (avoided `hard`) neither; nor a spot one whose reported
  price is above the pool's max price; one that was just reclaimed (avoided, not hard) only
  when nothing else sells. Then, by the placement strategy: enough stock before little
  (UnderStock) and then the lower spot price (priceCapacityOptimized), stock alone
  (capacityOptimized), price alone (lowestPrice), or stock and then the expected cost per
  useful instance-hour: the price and the interruption rate learned there
  (lowestInterruptionCost, api/interruptions.py); then the spec's type order, the zone with
  fewest of the pool's instances, the spec's zone order.
- With on-demand fallback, a slot no spot offering can fill (nothing left but avoided or sold
  out ones) is created POSTPAID_BY_HOUR, at most `max_on_demand` of them in the pool.
- Back to spot, with hysteresis (`due_back_to_spot`): an on-demand slot returns only after spot
  stock has been seen sellable, continuously, for `hold` seconds *and* the slot itself has been
  on-demand for `hold` seconds. A slot that returns and falls back again starts its wait
  afresh, so no slot moves back more than once per `hold`: it cannot flap.
"""

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from spotpool.api.interruptions import Learned, expected_cost
from spotpool.api.spec import ChargeType
from spotpool.api.spec import PlacementStrategy as Strategy


class Stock(IntEnum):
    """StatusCategory as an order: more is better. UNKNOWN when the look-up gave nothing."""

    WITHOUT = 0
    UNDER = 1
    UNKNOWN = 2
    NORMAL = 3
    ENOUGH = 4


_CATEGORIES = {
    "WithoutStock": Stock.WITHOUT,
    "UnderStock": Stock.UNDER,
    "NormalStock": Stock.NORMAL,
    "EnoughStock": Stock.ENOUGH,
}


@dataclass(frozen=True)
class Offering:
    """One (zone, type, charge type) as DescribeZoneInstanceConfigInfos reports it."""

    zone: str
    instance_type: str
    charge_type: ChargeType
    selling: bool  # Status SELL (not SOLD_OUT)
    stock: Stock
    price: float | None = None  # hourly price after discount (the spot price); None: unknown

    @classmethod
    def from_api(
        cls,
        zone: str,
        instance_type: str,
        charge_type: str,
        status: str,
        category: str | None,
        price: float | None = None,
    ) -> "Offering":
        selling = status == "SELL"
        stock = _CATEGORIES.get(category or "", Stock.UNKNOWN if selling else Stock.WITHOUT)
        return cls(zone, instance_type, ChargeType(charge_type), selling, stock, price)

    @property
    def key(self) -> "Key":
        return (self.zone, self.instance_type, self.charge_type)


Key = tuple[str, str, ChargeType]  # zone, instance type, charge type


@dataclass(frozen=True)
class Slot:
    """Where one slot's instance is (or is to be)."""

    zone: str
    instance_type: str
    charge_type: ChargeType

    @property
    def key(self) -> "Key":
        return (self.zone, self.instance_type, self.charge_type)


@dataclass(frozen=True)
class Avoided:
    """Offerings to stay away from now: `hard` ones answered "no stock" (never tried again
    until they expire), the others were reclaimed (tried only when nothing else sells)."""

    hard: frozenset[Key] = frozenset()
    soft: frozenset[Key] = frozenset()


@dataclass
class Wants:
    """What the pool asks of placement."""

    zones: list[str]
    types: list[str]
    charge_type: ChargeType = ChargeType.SPOTPAID
    max_on_demand: int = 0  # 0: no on-demand fallback
    stock: Mapping[Key, Offering] = field(default_factory=dict)
    avoided: Avoided = field(default_factory=Avoided)
    strategy: Strategy = Strategy.PRICE_CAPACITY_OPTIMIZED
    max_price: float | None = None  # spotMaxPrice: no spot offering priced above it
    # Learned interruptions and instance-hours per (zone, type); missing: none seen.
    learned: Mapping[tuple[str, str], Learned] = field(default_factory=dict)
    interruption_cost_hours: float = 1.0  # spec.interruptionCostHours

    def score(self, key: Key, offering: Offering | None) -> float:
        """What the strategy compares after stock: the spot price, or for
        lowestInterruptionCost the expected cost per useful instance-hour (inf: unknown)."""
        if offering is None or offering.price is None:
            return math.inf
        if self.strategy is not Strategy.LOWEST_INTERRUPTION_COST or key[2] != ChargeType.SPOTPAID:
            return offering.price  # an on-demand instance is not taken back
        return expected_cost(offering.price, self.rate(key), self.interruption_cost_hours)

    def rate(self, key: Key) -> float:
        """Learned interruptions per instance-hour of a spot offering (0: none seen)."""
        learned = self.learned.get((key[0], key[1]))
        return learned.rate if learned is not None else 0.0

    def too_dear(self, offering: Offering | None) -> bool:
        """A spot offering whose reported price is above the max price (unknown: not)."""
        return (
            self.max_price is not None
            and offering is not None
            and offering.charge_type is ChargeType.SPOTPAID
            and offering.price is not None
            and offering.price > self.max_price
        )


class NoCapacity(Exception):
    """No offering can take the slot now (every one sold out, just refused or too dear)."""


Rank = tuple[int, int, float, int]


def _rank(wants: Wants, key: Key, offering: Offering | None, t_index: int) -> Rank:
    """(softly avoided, short of stock, price, type position): smaller is better. Unknown
    prices rank after known ones; the strategy decides which of stock and price count."""
    stock = offering.stock if offering is not None else Stock.UNKNOWN
    short = int(stock <= Stock.UNDER)
    price = wants.score(key, offering)
    if wants.strategy is Strategy.CAPACITY_OPTIMIZED:
        price = 0.0
    elif wants.strategy is Strategy.LOWEST_PRICE:
        short = 0
    return (int(key in wants.avoided.soft), short, price, t_index)


def _ranked(wants: Wants, charge: ChargeType) -> list[tuple[Rank, int, Key]]:
    """(rank, zone position, offering) for every offering a slot of `charge` may go to:
    never a sold out, hard-avoided or too dear one; softly avoided ones rank last."""
    found = []
    for t_index, kind in enumerate(wants.types):
        for z_index, zone in enumerate(wants.zones):
            key = (zone, kind, charge)
            offering = wants.stock.get(key)
            if (offering is not None and not offering.selling) or key in wants.avoided.hard:
                continue
            if wants.too_dear(offering):
                continue
            found.append((_rank(wants, key, offering, t_index), z_index, key))
    return sorted(found)


def candidates(wants: Wants, charge: ChargeType) -> list[Key]:
    """The offerings a slot of `charge` may go to, best first (before spreading by zone)."""
    return [key for _, _, key in _ranked(wants, charge)]


def spot_fills(wants: Wants) -> bool:
    """True when some spot offering can be tried now without going against an avoidance."""
    return any(key not in wants.avoided.soft for key in candidates(wants, ChargeType.SPOTPAID))


def spot_sells_well(wants: Wants) -> bool:
    """True when some spot offering is selling with stock to spare (Normal or Enough) and is
    not avoided: the signal an on-demand slot waits to see for its hold period."""
    for key in candidates(wants, ChargeType.SPOTPAID):
        offering = wants.stock.get(key)
        if key not in wants.avoided.soft and offering and offering.stock >= Stock.NORMAL:
            return True
    return False


def place(
    wants: Wants, live: Mapping[int, Slot], slots: Iterable[int], on_demand_ok: bool = True
) -> dict[int, Slot]:
    """Where each of `slots` goes, given the pool's `live` slots (left where they are): the
    best-ranked offering, and among equally ranked zones the one holding fewest of the
    pool's instances. Raises NoCapacity for the first slot nothing can take."""
    placed: dict[int, Slot] = {}
    in_zone: dict[str, int] = {}
    for where in live.values():
        in_zone[where.zone] = in_zone.get(where.zone, 0) + 1
    on_demand = sum(1 for where in live.values() if where.charge_type != wants.charge_type)
    spot = _ranked(wants, wants.charge_type)
    for slot in sorted(slots):
        ranked = spot
        fallback = (
            on_demand_ok
            and wants.charge_type is ChargeType.SPOTPAID
            and on_demand < wants.max_on_demand
            and all(key in wants.avoided.soft for _, _, key in spot)
        )
        if fallback:
            ranked = _ranked(wants, ChargeType.POSTPAID_BY_HOUR) or spot
        if not ranked:
            dear = "" if wants.max_price is None else f" or priced above {wants.max_price}"
            raise NoCapacity(
                f"slot {slot}: every offering of {', '.join(wants.types)} in "
                f"{', '.join(wants.zones)} is sold out{dear} or refused stock just now"
            )
        _, _, key = min(ranked, key=lambda r: (r[0], in_zone.get(r[2][0], 0), r[1]))
        placed[slot] = Slot(*key)
        in_zone[key[0]] = in_zone.get(key[0], 0) + 1
        if key[2] != wants.charge_type:
            on_demand += 1
    return placed


def due_back_to_spot(
    on_demand_since: Mapping[int, float],
    spot_seen_since: float | None,
    now: float,
    hold: float,
) -> list[int]:
    """On-demand slots to move back to spot now: spot stock has been seen selling well for
    `hold` seconds without a break, and the slot has been on-demand for `hold` seconds."""
    if spot_seen_since is None or now - spot_seen_since < hold:
        return []
    return sorted(slot for slot, since in on_demand_since.items() if now - since >= hold)


def seen_since(previous: float | None, selling: bool, now: float) -> float | None:
    """When spot stock was first seen selling in the current unbroken run (None: not now)."""
    if not selling:
        return None
    return now if previous is None else previous
