"""Per offering (account digest, region, zone, instance type): the spot price and stock the
last placement read, and the interruption rate the operator learned there. Labels name an
offering, never a pool or an instance: the series grow with zones x types, not with pools."""

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Gauge

from spotpool.api.interruptions import Learned, OfferingKey
from spotpool.api.status import PlacedOffering

LABELS = ["account", "region", "zone", "instance_type"]
# StatusCategory as a number (more is better): what a Grafana threshold can colour.
STOCK_LEVELS = {"SoldOut": 0, "WithoutStock": 0, "UnderStock": 1, "NormalStock": 3,
                "EnoughStock": 4}  # fmt: skip


class OfferingMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.price = Gauge(
            "spotpool_offering_spot_price",
            "Spot price an hour the last stock look-up reported.",
            LABELS,
            registry=registry,
        )
        self.stock = Gauge(
            "spotpool_offering_stock_level",
            "Stock the last look-up reported: 0 sold out or none, 1 under, 3 normal, 4 enough.",
            LABELS,
            registry=registry,
        )
        self.rate = Gauge(
            "spotpool_offering_interruption_rate",
            "Learned reclaims and notices per instance-hour (decayed, summed over replicas).",
            LABELS,
            registry=registry,
        )
        self.hours = Gauge(
            "spotpool_offering_observed_hours",
            "Instance-hours the learned rate divides by (decayed, summed over replicas).",
            LABELS,
            registry=registry,
        )

    def observe_offerings(self, account: str, region: str, rows: list[PlacedOffering]) -> None:
        for row in rows:
            labels = (account, region, row.zone, row.instance_type)
            if row.price is not None:
                self.price.labels(*labels).set(row.price)
            if row.stock in STOCK_LEVELS:
                self.stock.labels(*labels).set(STOCK_LEVELS[row.stock])

    def observe_learned(self, learned: Mapping[OfferingKey, Learned]) -> None:
        for key, found in learned.items():
            self.rate.labels(*key).set(found.rate)
            self.hours.labels(*key).set(found.hours)
