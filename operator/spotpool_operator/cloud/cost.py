"""What a pool costs: each instance's hourly price from the cloud's price list
(DescribeZoneInstanceConfigInfos: spot and on-demand per zone x type), summed into
`status.hourlyCost`, beside `status.onDemandHourlyCost`, what the same instances would cost on
demand.

Prices are looked up per (key pair, region), every zone x type held for it in one call, and
kept `ttl` seconds: pools of the same account share them (about one call a TTL between them),
and a status write within the TTL asks the cloud nothing. The call goes through the same
reused client and token bucket as every other direct call. A failed look-up never fails a
write: the prices held (however old), else the instances' earlier prices, serve; a pool with
an instance of unknown price shows no cost.
"""

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from spotpool.api.placement import Key, Offering
from spotpool.api.spec import ChargeType
from spotpool.api.status import Instance, SpotpoolStatus
from spotpool.engine.tencent import cloud, prices
from spotpool.engine.tencent.credentials import Credentials
from spotpool_operator.cloud.capacity import StockLister

log = logging.getLogger("spotpool_operator.cost")

Pair = tuple[str, str]  # zone, instance type
Quote = tuple[float | None, float | None]  # spot, on-demand: an hour
# (credentials, region, zones, types) -> (zone, type) -> quote: engine/tencent/stock.py, via a
# client.
PriceLister = Callable[[Credentials, str, list[str], list[str]], dict[Pair, Quote]]
# (credentials, region, types) -> type -> GPUs an instance (the cloud's Gpu); unlisted: unknown
GpuLister = Callable[[Credentials, str, list[str]], dict[str, int]]
GPU_RETRY = 60.0  # seconds before a type the cloud did not count is asked about again
MAX_VALUES = 100  # values a DescribeZoneInstanceConfigInfos filter takes
DIGITS = 6  # prices carry 4 decimals; sums are rounded past float noise


def instance_price(
    instance: Instance, quote: Quote | None, pool_charge: ChargeType
) -> float | None:
    """What the instance costs an hour: the on-demand price for an on-demand instance, else
    the spot price."""
    if quote is None:
        return None
    charge = instance.charge_type or pool_charge
    return quote[1] if charge == ChargeType.POSTPAID_BY_HOUR else quote[0]


def priced(
    status: SpotpoolStatus,
    quotes: Mapping[Pair, Quote],
    pool_charge: ChargeType,
    before: SpotpoolStatus | None = None,
) -> SpotpoolStatus:
    """`status` with each instance's price and the pool's hourly cost and on-demand cost.

    An instance whose zone x type has no quote keeps the price `before` gave it (same
    instance id); a total with any unknown part is left unset rather than understated."""
    earlier = {i.instance_id: i.price for i in (before.instances if before else [])}
    instances: list[Instance] = []
    cost: float | None = 0.0
    on_demand: float | None = 0.0
    for instance in status.instances:
        quote = quotes.get((instance.zone or "", instance.instance_type or ""))
        price = instance_price(instance, quote, pool_charge)
        if price is None:
            price = earlier.get(instance.instance_id, instance.price)
        full = quote[1] if quote is not None else None
        if full is None and (instance.charge_type or pool_charge) == ChargeType.POSTPAID_BY_HOUR:
            full = price  # an on-demand instance's price is its on-demand price
        cost = None if cost is None or price is None else cost + price
        on_demand = None if on_demand is None or full is None else on_demand + full
        instances.append(instance.model_copy(update={"price": price}))
    return status.model_copy(
        update={
            "instances": instances,
            "hourly_cost": None if cost is None else round(cost, DIGITS),
            "on_demand_hourly_cost": None if on_demand is None else round(on_demand, DIGITS),
        }
    )


def savings(status: SpotpoolStatus) -> float | None:
    """On-demand cost minus actual cost an hour (None while either is unknown)."""
    if status.hourly_cost is None or status.on_demand_hourly_cost is None:
        return None
    return round(status.on_demand_hourly_cost - status.hourly_cost, DIGITS)


class PriceBook:
    """Prices per (key pair, region) and zone x type, cached `ttl` seconds."""

    def __init__(
        self,
        lister: PriceLister | None,
        ttl: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        gpu_lister: GpuLister | None = None,
    ) -> None:
        self.lister = lister
        self.gpu_lister = gpu_lister
        # GPUs per type, per (key pair, region): a type's count never changes, so kept; a type
        # the cloud did not count is asked about again after GPU_RETRY.
        self._gpus: dict[tuple[str, str], dict[str, int]] = {}
        self._uncounted: dict[tuple[str, str, str], float] = {}
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._quotes: dict[tuple[str, str], dict[Pair, tuple[float, Quote]]] = {}
        self._failed: dict[tuple[str, str], float] = {}  # when a failed look-up may be retried
        self.lookups = 0  # price calls made (for tests)

    def quotes(
        self, credentials: Credentials, region: str, pairs: Iterable[Pair]
    ) -> dict[Pair, Quote]:
        """The quotes of `pairs`: held ones within the TTL, the rest in one call for them all."""
        wanted = set(pairs)
        account = (_account(credentials), region)
        now = self.clock()
        with self._lock:
            held = dict(self._quotes.get(account, {}))
            retry_at = self._failed.get(account, 0.0)
        fresh = all(p in held and now - held[p][0] < self.ttl for p in wanted)
        if wanted and not fresh and self.lister is not None and now >= retry_at:
            zones, types = _asked(wanted, held)
            try:
                found = self.lister(credentials, region, zones, types)
            except Exception as error:  # throttled or failing: the held prices serve
                log.warning("price look-up in %s failed (%s): keeping the prices held", region,
                            getattr(error, "code", None) or type(error).__name__)  # fmt: skip
                with self._lock:
                    self._failed[account] = now + min(self.ttl, 30.0)
            else:
                with self._lock:
                    self.lookups += 1
                    book = self._quotes.setdefault(account, {})
                    book.update({pair: (now, quote) for pair, quote in found.items()})
                    held = dict(book)
                    self._failed.pop(account, None)
        return {pair: held[pair][1] for pair in wanted if pair in held}

    def gpus(self, credentials: Credentials, region: str, types: Iterable[str]) -> dict[str, int]:
        """GPUs of one instance of each of `types` the cloud counts (the rest: not known). One
        call for the types not held yet; a failed call counts none of them."""
        wanted = set(types)
        account = (_account(credentials), region)
        now = self.clock()
        with self._lock:
            held = dict(self._gpus.get(account, {}))
            asked = {
                t for t in wanted - set(held)
                if t and self._uncounted.get((*account, t), 0.0) <= now
            }  # fmt: skip
        if asked and self.gpu_lister is not None:
            try:
                found = self.gpu_lister(credentials, region, sorted(asked))
            except Exception as error:  # not counted: the limits hold growth meanwhile
                log.warning("GPU count look-up in %s failed (%s)", region,
                            getattr(error, "code", None) or type(error).__name__)  # fmt: skip
                found = {}
            with self._lock:
                self._gpus.setdefault(account, {}).update(found)
                held.update(found)
                for kind in asked - set(found):
                    self._uncounted[(*account, kind)] = now + GPU_RETRY
        return {t: held[t] for t in wanted if t in held}

    def learn(
        self, credentials: Credentials, region: str, offerings: Mapping[Key, Offering]
    ) -> None:
        """Take the prices a stock look-up for placement carried (capacity.py): a zone x type
        listed with both its spot and its on-demand price is priced for the TTL, no call."""
        spot = {(z, t): o.price for (z, t, c), o in offerings.items() if c is ChargeType.SPOTPAID}
        full = {
            (z, t): o.price
            for (z, t, c), o in offerings.items()
            if c is ChargeType.POSTPAID_BY_HOUR
        }
        now = self.clock()
        learnt = {
            pair: (now, (price, full[pair]))
            for pair, price in spot.items()
            if price is not None and full.get(pair) is not None
        }
        if learnt:
            with self._lock:
                self._quotes.setdefault((_account(credentials), region), {}).update(learnt)

    def sharing(self, lister: StockLister) -> StockLister:
        """`lister` (placement's stock look-up) whose answers also price pools: the look-up
        placement makes anyway saves the price call of the pools it covers."""

        def shared(
            credentials: Credentials,
            region: str,
            zones: list[str],
            types: list[str],
            charges: list[ChargeType],
        ) -> dict[Key, Offering]:
            found = lister(credentials, region, zones, types, charges)
            self.learn(credentials, region, found)
            return found

        return shared

    def price(
        self,
        status: SpotpoolStatus,
        credentials: Credentials | None,
        spec: Mapping[str, Any],
        before: SpotpoolStatus | None = None,
    ) -> SpotpoolStatus:
        """`status` priced for a pool of `spec` (its region and charge type)."""
        charge = ChargeType(spec.get("instanceChargeType") or ChargeType.SPOTPAID)
        region = str(spec.get("region") or "")
        pairs = {(i.zone, i.instance_type) for i in status.instances if i.zone and i.instance_type}
        quotes: dict[Pair, Quote] = {}
        gpus: dict[str, int] = {}
        if credentials is not None and region and pairs:
            quotes = self.quotes(credentials, region, pairs)
            gpus = self.gpus(credentials, region, {t for _, t in pairs})
        status = priced(status, quotes, charge, before)
        counted = [i.model_copy(update={"gpus": gpus.get(i.instance_type or "", i.gpus)})
                   for i in status.instances]  # fmt: skip
        return status.model_copy(update={"instances": counted})

    async def price_async(
        self,
        status: SpotpoolStatus,
        credentials: Credentials | None,
        spec: Mapping[str, Any],
        before: SpotpoolStatus | None = None,
    ) -> SpotpoolStatus:
        """`price` off the event loop (it may call the cloud); never raises."""
        try:
            return await asyncio.to_thread(self.price, status, credentials, spec, before)
        except Exception as error:  # a bad spec or price: the write goes on without a cost
            log.warning("could not price the pool: %s", type(error).__name__)
            return status


def _asked(
    wanted: set[Pair], held: Mapping[Pair, tuple[float, Quote]]
) -> tuple[list[str], list[str]]:
    """The zones and types one call asks for: the wanted pairs', and every pair held for the
    account and region too (the same call renews them all, so pools of one account ask about
    once a TTL together), within the API's 100 values a filter."""
    zones, types = {z for z, _ in wanted}, {t for _, t in wanted}
    more_zones, more_types = zones | {z for z, _ in held}, types | {t for _, t in held}
    if len(more_zones) <= MAX_VALUES and len(more_types) <= MAX_VALUES:
        zones, types = more_zones, more_types
    return sorted(zones), sorted(types)


def price_lister(endpoint: str | None) -> PriceLister:
    """Prices from the real cloud, or from the emulator at `endpoint`, on the reused clients."""

    def lister(
        credentials: Credentials, region: str, zones: list[str], types: list[str]
    ) -> dict[Pair, Quote]:
        return prices.hourly_prices(cloud.cvm(credentials, region, endpoint), zones, types)

    return lister


def gpu_lister(endpoint: str | None) -> GpuLister:
    """GPU counts per instance type from the real cloud, or from the emulator at `endpoint`."""

    def lister(credentials: Credentials, region: str, types: list[str]) -> dict[str, int]:
        return prices.type_gpus(cloud.cvm(credentials, region, endpoint), types)

    return lister


def _account(credentials: Credentials) -> str:
    """The key pair as a cache key (a digest: a SecretKey is never held in clear here)."""
    return credentials.identity_key()  # stable across renewals of temporary keys
