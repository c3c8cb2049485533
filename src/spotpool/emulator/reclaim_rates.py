"""Random spot reclaims per zone x instance type: `spotpool emulator serve --reclaim-rates
ap-guangzhou-3/GN7.2XLARGE32=6/h` (repeatable) beside the flat `--reclaim-rate`, so a bench can
make one zone cheap and unreliable and another dearer and calm. Each running spot instance is
reclaimed in a given second with probability rate / 3600, from a random generator seeded by
`--seed` (the same seed and the same fleet give the same draws)."""

import re

from spotpool.emulator.catalog import INSTANCE_TYPES, REGIONS, zones

Key = tuple[str, str]  # zone, instance type

_RATE = re.compile(
    r"^(?P<zone>[a-z0-9-]+)/(?P<type>[A-Za-z0-9.]+)=(?P<rate>[0-9]+(\.[0-9]+)?)(/h)?$"
)


def parse_rate(text: str) -> tuple[Key, float]:
    """`ZONE/TYPE=RATE[/h]` -> ((zone, type), reclaims per instance-hour)."""
    found = _RATE.match(text.strip())
    if found is None:
        raise ValueError(f"{text!r}: expected ZONE/TYPE=RATE/h, e.g. ap-guangzhou-3/S5.MEDIUM2=6/h")
    zone, kind = found["zone"], found["type"]
    if not any(zone in zones(region) for region in REGIONS):
        raise ValueError(f"{text!r}: unknown zone {zone}")
    if kind not in INSTANCE_TYPES:
        raise ValueError(f"{text!r}: unknown instance type {kind}")
    return (zone, kind), float(found["rate"])


def parse_rates(items: list[str]) -> dict[Key, float]:
    return dict(parse_rate(item) for item in items)


class ReclaimRates:
    """Reclaims per instance-hour: a zone x type's own rate, else the flat default."""

    def __init__(self, default: float = 0.0, rates: dict[Key, float] | None = None) -> None:
        self.default = default
        self.rates = dict(rates or {})

    def any(self) -> bool:
        return self.default > 0 or any(rate > 0 for rate in self.rates.values())

    def per_second(self, zone: str, instance_type: str) -> float:
        return self.rates.get((zone, instance_type), self.default) / 3600
