"""Why a pool's instances are where they are: the ranking placement used, as status.placement
shows it (and `spotpool offerings` prints). Pure, from the same Wants placement ranked by."""

import math
from collections.abc import Mapping
from datetime import datetime

from spotpool.api.placement import Key, Offering, Slot, Stock, Wants, candidates
from spotpool.api.spec import ChargeType
from spotpool.api.spec import PlacementStrategy as Strategy
from spotpool.api.status import PlacedOffering, Placement

STOCK_NAMES = {
    Stock.WITHOUT: "WithoutStock",
    Stock.UNDER: "UnderStock",
    Stock.NORMAL: "NormalStock",
    Stock.ENOUGH: "EnoughStock",
}
WHY_BEST = {
    Strategy.LOWEST_INTERRUPTION_COST: "the lowest expected cost per useful instance-hour",
    Strategy.PRICE_CAPACITY_OPTIMIZED: "stock to spare at the lowest spot price",
    Strategy.CAPACITY_OPTIMIZED: "stock to spare, first in instanceTypes",
    Strategy.LOWEST_PRICE: "the lowest spot price",
}


def stock_name(offering: Offering | None) -> str | None:
    if offering is None:
        return None
    if not offering.selling:
        return "SoldOut"
    return STOCK_NAMES.get(offering.stock)


def _note(wants: Wants, key: Key, offering: Offering | None) -> str | None:
    if offering is not None and not offering.selling:
        return "sold out: never tried"
    if key in wants.avoided.hard:
        return "answered no stock just now: not tried for the avoid period"
    if wants.too_dear(offering):
        return f"priced above spotMaxPrice {wants.max_price}: never tried"
    if key in wants.avoided.soft:
        return "reclaimed just now: tried last for the avoid period"
    return None


def offerings(wants: Wants, where: Mapping[int, Slot] | None = None) -> list[PlacedOffering]:
    """Every spot offering of the pool (zones x types), tried ones best first, then the rest."""
    held: dict[Key, int] = {}
    for slot in (where or {}).values():
        held[slot.key] = held.get(slot.key, 0) + 1
    ranked = candidates(wants, ChargeType.SPOTPAID)
    others = [
        (zone, kind, ChargeType.SPOTPAID)
        for kind in wants.types
        for zone in wants.zones
        if (zone, kind, ChargeType.SPOTPAID) not in ranked
    ]
    rows = []
    for key in [*ranked, *others]:
        offering = wants.stock.get(key)
        learned = wants.learned.get((key[0], key[1]))
        score = wants.score(key, offering)
        rows.append(
            PlacedOffering(
                zone=key[0],
                instance_type=key[1],
                price=offering.price if offering is not None else None,
                stock=stock_name(offering),
                interruption_rate=round(learned.rate, 4) if learned else 0.0,
                observed_hours=round(learned.hours, 3) if learned else 0.0,
                score=round(score, 4) if math.isfinite(score) else None,
                instances=held.get(key, 0),
                note=_note(wants, key, offering),
            )
        )
    return rows


def report(wants: Wants, where: Mapping[int, Slot], now: datetime) -> Placement:
    """status.placement after placing: the ranking and one sentence on where new slots go."""
    rows = offerings(wants, where)
    best = next((r for r in rows if r.note is None), rows[0] if rows else None)
    if best is None:
        message = "no spot offering to place on"
    else:
        message = f"new slots go to {best.zone} {best.instance_type}: {WHY_BEST[wants.strategy]}"
        if wants.strategy is Strategy.LOWEST_INTERRUPTION_COST and best.price is not None:
            message += (
                f" ({best.score} an hour = price {best.price} x (1 + "
                f"{best.interruption_rate} interruptions an hour learned x "
                f"{wants.interruption_cost_hours} h each))"
            )
        elif best.price is not None:
            message += f" ({best.price} an hour)"
    held = [r for r in rows if r.instances and r is not best]
    if held:
        message += "; instances elsewhere stay where they were placed (a move would replace them)"
    return Placement(strategy=wants.strategy.value, time=now, message=message, offerings=rows)
