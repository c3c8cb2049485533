"""Interruption rates learned from what the operator sees: per (account, region, zone,
instance type), the interruptions (reclaims and termination notices) per instance-hour run
there, both counts decayed exponentially with a settable half-life. Pure data and rules.

Sharing without losing counts: every writer (a replica, a process) keeps its own `Tally` per
offering and only ever writes its own; a reader sums every writer's. Summing is the merge: no
writer overwrites another's counts, so concurrent replicas lose nothing (a G-counter that
decays). A tally is stored with the moment it was decayed to, so any reader can bring it to now.
"""

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pydantic import BaseModel, Field

# (account, region, zone, instance type); the account is a digest of the SecretId, never a key.
OfferingKey = tuple[str, str, str, str]

# A fresh offering counts as this many interruption-free instance-hours already seen: one
# reclaim in a zone nobody ran in is not yet a rate of "one an instant".
PRIOR_HOURS = 1.0


class Tally(BaseModel):
    """Decayed interruptions and instance-hours of one offering by one writer, as of `at`."""

    interruptions: float = Field(0.0, ge=0)
    hours: float = Field(0.0, ge=0)
    at: float = Field(0.0, description="Unix time the counts were decayed to.")

    def decayed(self, now: float, half_life: float) -> "Tally":
        """The same counts brought to `now` (never forward in time: a later `at` stays)."""
        if now <= self.at or half_life <= 0:
            return self
        factor = math.pow(0.5, (now - self.at) / half_life)
        return Tally(interruptions=self.interruptions * factor, hours=self.hours * factor, at=now)

    def plus(self, interruptions: float, hours: float, now: float, half_life: float) -> "Tally":
        base = self.decayed(now, half_life)
        return Tally(
            interruptions=base.interruptions + interruptions,
            hours=base.hours + hours,
            at=max(now, base.at),
        )

    def negligible(self) -> bool:
        return self.interruptions < 1e-3 and self.hours < 1e-3


@dataclass(frozen=True)
class Learned:
    """One offering's summed, decayed counts and the rate they give."""

    interruptions: float
    hours: float

    @property
    def rate(self) -> float:
        """Interruptions per instance-hour (PRIOR_HOURS of calm assumed)."""
        return self.interruptions / (self.hours + PRIOR_HOURS)


def summed(
    writers: Iterable[Mapping[OfferingKey, Tally]], now: float, half_life: float
) -> dict[OfferingKey, Learned]:
    """Every writer's tallies brought to `now` and added up per offering: the merge."""
    totals: dict[OfferingKey, tuple[float, float]] = {}
    for tallies in writers:
        for key, tally in tallies.items():
            current = tally.decayed(now, half_life)
            events, hours = totals.get(key, (0.0, 0.0))
            totals[key] = (events + current.interruptions, hours + current.hours)
    return {key: Learned(events, hours) for key, (events, hours) in totals.items()}


def encode_key(key: OfferingKey) -> str:
    """A key as one string: the parts never hold '/' (zones, types, regions, digests)."""
    return "/".join(key)


def decode_key(text: str) -> OfferingKey | None:
    parts = text.split("/")
    if len(parts) != 4 or not all(parts):
        return None
    return (parts[0], parts[1], parts[2], parts[3])


def expected_cost(price: float, rate: float, interruption_cost_hours: float) -> float:
    """What one useful instance-hour costs: the hour's price, plus the hours each expected
    interruption throws away (a lost boot, a lost checkpoint interval, the gap), paid again at
    the same price."""
    return price * (1.0 + rate * interruption_cost_hours)


def account_digest(secret_id: str, endpoint: str | None = None) -> str:
    """The account part of a key: a short digest of the SecretId (shown in tables and labels;
    the SecretId itself stays out of ConfigMaps and metrics), and of the cloud endpoint when
    it is not Tencent Cloud's own: another emulator is another cloud."""
    name = secret_id if not endpoint else f"{secret_id}@{endpoint}"
    return hashlib.sha256(name.encode()).hexdigest()[:12]
