"""Capacity-aware placement for the operator: the cloud's stock (one cached
DescribeZoneInstanceConfigInfos per key pair, region and spec shape), the offerings to avoid
for a while after a reclaim or a no-stock answer (like Karpenter's three minutes), and where a
pool's new slots go (the pure rules are spotpool.api.placement): by stock, then by the spot
price the same look-up reports and the interruption rates the learner counted from the reclaims
seen here (interruptions.py), never above spotMaxPrice (spec.placementStrategy).

A failed stock look-up never blocks a create: placement then ranks by the spec's order and the
avoidances alone, as if every offering sold.
"""

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime

from pydantic import BaseModel, Field

from spotpool.api.interruptions import Learned, account_digest
from spotpool.api.placement import Avoided, Key, NoCapacity, Offering, Slot, Wants, place
from spotpool.api.placement_report import report
from spotpool.api.spec import ChargeType, SpotpoolSpec
from spotpool.api.stackconfig import StackConfig
from spotpool.api.status import Instance, Placement
from spotpool.engine.tencent import cloud, stock
from spotpool.engine.tencent.credentials import Credentials
from spotpool_operator.cloud.interruptions import Learner

log = logging.getLogger("spotpool_operator.capacity")
# (credentials, region, zones, types, charge types) -> what sells: engine/tencent/stock.py, via a
# client.
StockLister = Callable[
    [Credentials, str, list[str], list[str], list[ChargeType]], dict[Key, Offering]
]
Replan = Callable[[StackConfig, list[int]], StackConfig | None]


class CapacitySettings(BaseModel):
    avoid_seconds: float = Field(
        180.0, ge=0, description="How long a reclaimed or refused zone x type is avoided."
    )
    stock_ttl: float = Field(
        5.0, ge=0, description="Seconds a stock answer serves (a reclaim storm asks once)."
    )


class Capacity:
    def __init__(
        self,
        lister: StockLister | None,
        settings: CapacitySettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        learner: Learner | None = None,
        endpoint: str | None = None,
        on_offerings: Callable[[str, str, Wants], None] | None = None,
    ) -> None:
        self.lister = lister
        self.learner = learner  # interruption rates learned from reclaims (None: none)
        self.on_offerings = on_offerings  # metrics of what each placement read
        self.endpoint = endpoint  # the cloud's (None: Tencent Cloud): part of the account key
        self.settings = settings or CapacitySettings()
        self.clock = clock
        self._lock = threading.Lock()
        self._avoid: dict[Key, tuple[float, bool]] = {}  # key -> (until, hard)
        self._stock: dict[tuple[object, ...], tuple[float, dict[Key, Offering]]] = {}
        self.lookups = 0  # stock calls made (for tests and metrics)

    # --- avoidance ---------------------------------------------------------------------------

    def avoid(self, keys: Iterable[Key], hard: bool, why: str) -> None:
        """Stay away from `keys` for the avoid period: `hard` after a no-stock answer (never
        tried meanwhile), soft after a reclaim (tried only when nothing else sells)."""
        until = self.clock() + self.settings.avoid_seconds
        with self._lock:
            for key in keys:
                _, was_hard = self._avoid.get(key, (0.0, False))
                self._avoid[key] = (until, hard or was_hard)
            if hard:  # the cloud just contradicted the stock we hold: ask again next time
                self._stock.clear()
                log.info("avoiding %s %s %s for %.0f s: %s", *key, self.settings.avoid_seconds, why)

    def avoided(self) -> Avoided:
        now = self.clock()
        with self._lock:
            for key in [k for k, (until, _) in self._avoid.items() if until <= now]:
                del self._avoid[key]
            current = self._avoid.items()
            return Avoided(
                hard=frozenset(k for k, (_, hard) in current if hard),
                soft=frozenset(k for k, (_, hard) in current if not hard),
            )

    def reclaimed(
        self,
        instances: Iterable[Instance],
        pool_charge: ChargeType,
        where: tuple[str, str] | None = None,
    ) -> None:
        """The cloud took these instances: their zone x type is short of stock for a while,
        and (`where`: account digest, region) the learner counts an interruption there."""
        taken: list[tuple[Key, str]] = [
            ((i.zone, i.instance_type, ChargeType(i.charge_type or pool_charge)), i.instance_id)
            for i in instances
            if i.zone and i.instance_type
        ]
        if taken:
            self.avoid([key for key, _ in taken], hard=False, why="reclaimed")
        for (zone, kind, charge), instance_id in taken:
            if self.learner is not None and where is not None and charge is ChargeType.SPOTPAID:
                self.learner.interrupted((*where, zone, kind), instance_id)

    def learned(self, credentials: Credentials, region: str) -> dict[tuple[str, str], Learned]:
        """(zone, type) -> learned interruptions and hours for this account and region."""
        if self.learner is None:
            return {}
        return self.learner.of(account_of(credentials, self.endpoint), region)

    # --- stock -------------------------------------------------------------------------------

    def stock(
        self, credentials: Credentials, region: str, spec: SpotpoolSpec
    ) -> dict[Key, Offering]:
        """What the pool's zones sell of its types (cached a few seconds); {} when unknown."""
        if self.lister is None:
            return {}
        zones, types = spec.zones(), spec.types()
        charges = [spec.instance_charge_type]
        if spec.instance_charge_type is ChargeType.SPOTPAID:
            charges.append(ChargeType.POSTPAID_BY_HOUR)
        key = (_account(credentials), region, tuple(zones), tuple(types), tuple(charges))
        now = self.clock()
        with self._lock:
            cached = self._stock.get(key)
        if cached is not None and now - cached[0] < self.settings.stock_ttl:
            return cached[1]
        try:
            found = self.lister(credentials, region, zones, types, charges)
        except Exception as error:  # throttled or failing: place without it, never block
            log.warning("stock look-up in %s failed (%s): placing by spec order", region,
                        getattr(error, "code", None) or type(error).__name__)  # fmt: skip
            return cached[1] if cached is not None else {}
        with self._lock:
            self.lookups += 1
            self._stock[key] = (now, found)
        return found

    def wants(self, spec: SpotpoolSpec, credentials: Credentials, region: str) -> Wants:
        fallback = spec.on_demand_fallback
        wants = Wants(
            zones=spec.zones(),
            types=spec.types(),
            charge_type=spec.instance_charge_type,
            max_on_demand=fallback.max_on_demand if fallback and fallback.enabled else 0,
            stock=self.stock(credentials, region, spec),
            avoided=self.avoided(),
            strategy=spec.placement_strategy,
            max_price=float(spec.spot_max_price) if spec.spot_max_price else None,
            learned=self.learned(credentials, region),
            interruption_cost_hours=spec.interruption_cost_hours,
        )
        if self.on_offerings is not None:
            self.on_offerings(account_of(credentials, self.endpoint), region, wants)
        return wants

    # --- placement ---------------------------------------------------------------------------

    def plan(
        self,
        spec: SpotpoolSpec,
        config: StackConfig,
        live: Mapping[int, Slot],
        slots: Iterable[int],
        credentials: Credentials,
        region: str,
        back_to_spot: Iterable[int] = (),
        on_report: Callable[[Placement], None] | None = None,
    ) -> StackConfig:
        """`config` with the live slots where they are and `slots` placed by stock; the
        `back_to_spot` slots (on-demand now) placed on spot, or left where they are when no
        spot offering sells. Raises NoCapacity when a slot has nowhere to go."""
        moving = set(back_to_spot)
        staying = {
            s: where
            for s, where in live.items()
            if s not in moving and s < config.count and _fits(where, config)
        }
        where = dict(staying)
        # Slots to create, and live ones the spec no longer allows (a new type list, zone list
        # or charge type): those are placed afresh, which replaces them.
        new = sorted({*slots, *(s for s in live if s not in staying and s not in moving)})
        new = [s for s in new if s < config.count]
        if not new and not moving:  # nothing to place: no stock look-up
            return config.placing(
                {s: (w.zone, w.instance_type, w.charge_type) for s, w in where.items()}
            )
        wants = self.wants(spec, credentials, region)
        where.update(place(wants, staying, new))
        for slot in sorted(moving):
            try:
                where.update(place(wants, where, [slot], on_demand_ok=False))
            except NoCapacity:
                if slot in live:
                    where[slot] = live[slot]
        if on_report is not None:  # status.placement: why the instances are where they are
            on_report(report(wants, where, datetime.now(UTC)))
        return config.placing(
            {s: (w.zone, w.instance_type, w.charge_type) for s, w in where.items()}
        )

    def replanner(self, spec: SpotpoolSpec, credentials: Credentials, region: str) -> Replan:
        """What the engine calls when the cloud had no stock for some slots: avoid where they
        were headed and place them elsewhere (None when nothing else can take them)."""

        def replan(config: StackConfig, slots: list[int]) -> StackConfig | None:
            refused = {s: _slot_of(config, s) for s in slots}
            self.avoid([w.key for w in refused.values()], hard=True, why="no stock")
            others = {s: _slot_of(config, s) for s in range(config.count) if s not in refused}
            try:
                placed = place(self.wants(spec, credentials, region), others, slots)
            except NoCapacity as error:
                log.warning("no stock anywhere: %s", error)
                return None
            return config.placing(
                {s: (w.zone, w.instance_type, w.charge_type) for s, w in placed.items()}
            )

        return replan


def stock_lister(endpoint: str | None) -> StockLister:
    """Stock from the real cloud, or from the emulator at `endpoint`, on the reused clients."""

    def lister(
        credentials: Credentials,
        region: str,
        zones: list[str],
        types: list[str],
        charges: list[ChargeType],
    ) -> dict[Key, Offering]:
        return stock.offerings(cloud.cvm(credentials, region, endpoint), zones, types, charges)

    return lister


def live_slots(instances: Iterable[Instance], pool_charge: ChargeType) -> dict[int, Slot]:
    """Where the status's instances are (those whose zone and type it knows)."""
    return {
        i.slot: Slot(i.zone, i.instance_type, ChargeType(i.charge_type or pool_charge))
        for i in instances
        if i.slot is not None and i.zone and i.instance_type
    }


def _fits(where: Slot, config: StackConfig) -> bool:
    """The spec still allows this placement (an on-demand fallback counts for a spot pool)."""
    charge_ok = where.charge_type is config.charge_type or (
        config.charge_type is ChargeType.SPOTPAID
        and where.charge_type is ChargeType.POSTPAID_BY_HOUR
    )
    return where.zone in config.zones and where.instance_type in config.instance_types and charge_ok


def _slot_of(config: StackConfig, slot: int) -> Slot:
    return Slot(config.zone_of(slot), config.type_of(slot), config.charge_of(slot))


def account_of(credentials: Credentials, endpoint: str | None) -> str:
    """The account part of a learned rate's key: a digest of the SecretId (and endpoint), or of
    the role's account for temporary keys (their SecretId changes at every renewal)."""
    return account_digest(credentials.bucket_owner(), endpoint)


def _account(credentials: Credentials) -> str:
    return credentials.identity_key()  # stable across renewals of temporary keys
