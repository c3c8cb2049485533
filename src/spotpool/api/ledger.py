"""Limits reserved before the launch (pure rules): what one pool may hold at once under one
SpotpoolAccessPolicy's limits, given what the other pools of its namespace reserved in the
policy's ledger (spotpool.api.reservations), and the entry it reserves.

A pool asks for the instances it wants to hold at once (its slots, and the surge instances of
a notice or a rollout), never below what it holds now: no limit terminates an instance. Each
instance of its plan is priced and counted in GPUs from the cloud's own data (the quotes of the
spec's zones and types, the on-demand price where the pool may run on demand, the instance
type's `Gpu`); where a limit needs a figure that is not known, the pool does not grow.
"""

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from spotpool.api.access import Hold, Limits, Use
from spotpool.api.reservations import Reservation
from spotpool.api.spec import ChargeType, SpotpoolSpec
from spotpool.api.status import Instance

Quote = tuple[float | None, float | None]  # spot, on-demand: an hour
EPSILON = 1e-9  # a limit met exactly is met, whatever the float sums say


@dataclass(frozen=True)
class Unit:
    """What one instance of a pool's plan may take: GPUs and hourly cost (None: not known,
    and why)."""

    gpus: int | None = 0
    cost: float | None = 0.0
    gpus_unknown: str = ""
    cost_unknown: str = ""


@dataclass(frozen=True)
class Ask:
    """A pool's request under its namespace's limits."""

    namespace: str
    uid: str
    pool: str
    want: int  # instances to hold at once: slots and surge instances
    floor: int  # instances it holds now (kept whatever the limits)
    unit: Unit


def unit_of(
    spec: SpotpoolSpec,
    instances: Sequence[Instance],
    quotes: Mapping[tuple[str, str], Quote],
    gpus: Mapping[str, int],
) -> Unit:
    """The most one instance of the pool may cost and carry: the dearest zone x type of its
    spec (spot, and on-demand where it may run on demand: instanceChargeType
    POSTPAID_BY_HOUR, or onDemandFallback on) and of the instances it runs, and the most GPUs
    of its types (the cloud's count)."""
    on_demand = spec.instance_charge_type == ChargeType.POSTPAID_BY_HOUR
    fallback = spec.on_demand_fallback is not None and spec.on_demand_fallback.enabled
    prices: list[float] = [i.price for i in instances if i.price is not None]
    unpriced: list[str] = []
    for zone in spec.zones():
        for kind in spec.types():
            spot, full = quotes.get((zone, kind), (None, None))
            wanted = [full] if on_demand else [spot, full] if fallback else [spot]
            if any(price is None for price in wanted):
                unpriced.append(f"{kind} in {zone}")
            prices.extend(price for price in wanted if price is not None)
    kinds = dict.fromkeys([*spec.types(), *(i.instance_type or "" for i in instances)])
    uncounted = [kind or "(unknown type)" for kind in kinds if kind not in gpus]
    demand = " on demand" if on_demand or fallback else ""
    return Unit(
        gpus=None if uncounted else max((gpus[k] for k in kinds), default=0),
        cost=None if unpriced else max(prices, default=0.0),
        gpus_unknown=f"the cloud gives no GPU count for {_some(uncounted)}" if uncounted else "",
        cost_unknown=f"the cloud gives no price{demand} for {_some(unpriced)}" if unpriced else "",
    )


def _some(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def taken(
    entries: Mapping[str, Reservation],
    namespace: str,
    uid: str,
    unledgered: Mapping[str, Use] | None = None,
) -> Use:
    """What the other pools of `namespace` take: their entries in the ledger (retained ones
    too), and the use of pools there that have none yet (from before the limit: their status)."""
    others = [e for key, e in entries.items() if e.namespace == namespace and key != uid]
    uses = [Use(e.instances, e.gpus, e.hourly_cost) for e in others]
    uses += [u for key, u in (unledgered or {}).items() if key not in entries and key != uid]
    return Use(
        instances=sum(u.instances for u in uses),
        gpus=sum(u.gpus for u in uses),
        hourly_cost=round(sum(u.hourly_cost for u in uses), 6),
    )


def grant(policy: str, limits: Limits, ask: Ask, others: Use) -> Hold:
    """The instances `ask` may hold at once under one policy's limits, the others taking
    `others`: at most `ask.want`, never below `ask.floor`."""
    count, why = ask.want, ""
    for room, what, unknown in _bounds(limits, ask, others):
        allowed = max(room, ask.floor, 0)
        if allowed >= count:
            continue
        count = allowed
        held = f"held at {allowed} of {ask.want} instances: SpotpoolAccessPolicy {policy} limits "
        held += f"namespace {ask.namespace} to {what}"
        if unknown:
            why = f"{held}, and {unknown}: no growth until it does"
        else:
            why = (
                f"{held} and its other pools take {_taken(others, what)} (reserved before their "
                "launch); scale other pools down or ask the cluster admin to raise the limit"
            )
    return Hold(count, why)


def _bounds(limits: Limits, ask: Ask, others: Use) -> Iterable[tuple[int, str, str]]:
    """(room in instances, the limit in words, why its figure is unknown) per limit set."""
    if limits.instances is not None:
        yield limits.instances - others.instances, f"{limits.instances} instances", ""
    if limits.gpus is not None:
        what, each = f"{limits.gpus} GPUs", ask.unit.gpus
        if each is None:
            yield ask.floor, what, ask.unit.gpus_unknown
        elif each > 0:
            yield (limits.gpus - others.gpus) // each, what, ""
    if limits.hourly_cost is not None:
        what, price = f"{limits.hourly_cost:g} an hour", ask.unit.cost
        if price is None:
            yield ask.floor, what, ask.unit.cost_unknown
        elif price > 0:
            yield math.floor((limits.hourly_cost - others.hourly_cost) / price + EPSILON), what, ""


def _taken(others: Use, what: str) -> str:
    if what.endswith("GPUs"):
        return f"{others.gpus} GPUs"
    if what.endswith("an hour"):
        return f"{others.hourly_cost:g} an hour"
    return f"{others.instances}"


def reservation(ask: Ask, count: int, previous: Reservation | None = None) -> Reservation:
    """The entry for a pool holding `count` instances at most (never below its floor); a figure
    not known keeps what the previous entry said."""
    held = max(count, ask.floor)
    gpus = held * ask.unit.gpus if ask.unit.gpus is not None else None
    cost = round(held * ask.unit.cost, 6) if ask.unit.cost is not None else None
    return Reservation(
        namespace=ask.namespace,
        pool=ask.pool,
        instances=held,
        gpus=gpus if gpus is not None else (previous.gpus if previous else 0),
        hourly_cost=cost if cost is not None else (previous.hourly_cost if previous else 0.0),
    )


def widest(entry: Reservation, previous: Reservation | None) -> Reservation:
    """`entry`, raised to `previous` wherever that is larger: a reservation before a run only
    grows (it is lowered once the run is over and the instances gone)."""
    if previous is None:
        return entry
    return entry.model_copy(
        update={
            "instances": max(entry.instances, previous.instances),
            "gpus": max(entry.gpus, previous.gpus),
            "hourly_cost": max(entry.hourly_cost, previous.hourly_cost),
        }
    )
