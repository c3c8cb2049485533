"""The cloud is not perfect, on request: answers lost after the call took effect, a listing that
lags behind launches and terminations, RunInstances that makes fewer than asked, launches that
fail, throttling, internal errors and a load balancer's bare 503.

Everything is off by default (the emulator then behaves exactly as without this module) and
draws from the emulator's seeded random (`serve --seed`) only while a rate is above 0, so the
same seed still draws the same reclaims when nothing misbehaves. Set by `serve` options and at
run time by `/_emulator/misbehaviour` (misbehaviour_routes.py).
"""

import asyncio
import contextlib
import random
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spotpool.emulator.instances import LAUNCH_FAILED, InstanceRecord

DEFAULT_LOSE_ACTIONS = ("RunInstances", "TerminateInstances")
HTTP_503 = "HTTP503"  # the request log's Code of a call a load balancer answered
HTTP_503_BODY = (
    "<html><head><title>503 Service Temporarily Unavailable</title></head>"
    "<body><center><h1>503 Service Temporarily Unavailable</h1></center></body></html>"
)


class LoseAnswers(BaseModel):
    """A share of these actions' calls take full effect, then their answer is never sent."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")
    actions: list[str] = Field(default_factory=lambda: list(DEFAULT_LOSE_ACTIONS), alias="Actions")
    rate: float = Field(0.0, alias="Rate", ge=0.0, le=1.0)


class Misbehaviour(BaseModel):
    """What the emulated cloud does wrong, and how often (every rate a share 0..1 of calls or
    instances; all 0: a perfect cloud)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")
    lose_answers: LoseAnswers = Field(default_factory=LoseAnswers, alias="LoseAnswers")
    listing_lag_seconds: float = Field(0.0, ge=0.0, le=3600.0, alias="ListingLagSeconds")
    partial_run_rate: float = Field(0.0, alias="PartialRunRate", ge=0.0, le=1.0)
    launch_failed_rate: float = Field(0.0, alias="LaunchFailedRate", ge=0.0, le=1.0)
    throttle_rate: float = Field(0.0, alias="ThrottleRate", ge=0.0, le=1.0)
    server_error_rate: float = Field(0.0, alias="ServerErrorRate", ge=0.0, le=1.0)
    http503_rate: float = Field(0.0, alias="Http503Rate", ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _one_refusal_a_call(self) -> "Misbehaviour":
        # One draw decides a call's refusal: the two shares cannot add up to more than all.
        if self.throttle_rate + self.server_error_rate > 1.0:
            raise ValueError("ThrottleRate + ServerErrorRate must be at most 1")
        return self

    def updated(self, changes: dict[str, Any]) -> "Misbehaviour":
        """These settings with `changes` (a partial body, PascalCase) applied over them."""
        merged = self.model_dump(by_alias=True)
        for key, value in changes.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
        return Misbehaviour.model_validate(merged)


@dataclass
class Counters:
    """What the emulator did wrong since it started (or since the settings were cleared)."""

    lost_answers: dict[str, list[list[str]]] = field(default_factory=dict)  # action → ids a call
    partial_runs: list[dict[str, Any]] = field(default_factory=list)
    launch_failures: list[str] = field(default_factory=list)
    throttled: int = 0
    server_errors: int = 0
    http503: int = 0

    def describe(self) -> dict[str, Any]:
        return {
            "LostAnswers": {
                action: {"Count": len(calls), "InstanceIds": [i for ids in calls for i in ids]}
                for action, calls in self.lost_answers.items()
            },
            "PartialRuns": {"Count": len(self.partial_runs), "Runs": self.partial_runs},
            "LaunchFailures": {
                "Count": len(self.launch_failures),
                "InstanceIds": self.launch_failures,
            },
            "Throttled": self.throttled,
            "ServerErrors": self.server_errors,
            "Http503": self.http503,
        }


@dataclass
class _Departure:
    at: float  # when it left the listing: termination asked, or its reclaim notice ended
    before: InstanceRecord  # how the listing showed it until then (a copy)


class Misbehaving:
    """The settings at work: the draws, the counters, and what a lagging listing still shows."""

    def __init__(self, settings: Misbehaviour | None = None, rng: random.Random | None = None):
        self.settings = settings or Misbehaviour()
        self.random = rng or random.Random()
        self.counters = Counters()
        self._departed: dict[str, _Departure] = {}

    def configure(self, settings: Misbehaviour) -> None:
        self.settings = settings
        if settings.listing_lag_seconds <= 0:
            self._departed.clear()

    def clear(self) -> None:
        """Back to a perfect cloud, counters at 0."""
        self.configure(Misbehaviour())
        self.counters = Counters()

    def describe(self) -> dict[str, Any]:
        return {
            "Settings": self.settings.model_dump(by_alias=True),
            "Counters": self.counters.describe(),
        }

    def _draw(self, rate: float) -> bool:
        """True for a share `rate` of draws; no draw at all at 0 (the seed's sequence kept)."""
        return rate > 0 and self.random.random() < rate

    # -- refusals: nothing done ------------------------------------------------------------
    def unavailable(self) -> bool:
        """A load balancer answers 503 before the call reaches the API."""
        if self._draw(self.settings.http503_rate):
            self.counters.http503 += 1
            return True
        return False

    def refusal(self) -> str | None:
        """The error code a call is refused with before it does anything, if any."""
        throttle, server = self.settings.throttle_rate, self.settings.server_error_rate
        if throttle + server <= 0:
            return None
        draw = self.random.random()
        if draw < throttle:
            self.counters.throttled += 1
            return "RequestLimitExceeded"
        if draw < throttle + server:
            self.counters.server_errors += 1
            return "InternalError"
        return None

    # -- lost answers: all done, nothing said ----------------------------------------------
    def loses_answer(self, action: str) -> bool:
        lose = self.settings.lose_answers
        return action in lose.actions and self._draw(lose.rate)

    def lost(self, action: str, params: dict[str, Any] | None, reply: dict[str, Any]) -> list[str]:
        """Count a lost answer; the instances the call created or acted on."""
        ids = reply.get("InstanceIdSet") or (params or {}).get("InstanceIds") or []
        ids = [str(i) for i in ids]
        self.counters.lost_answers.setdefault(action, []).append(ids)
        return ids

    # -- RunInstances: fewer than asked, launches that fail --------------------------------
    def run_count(self, requested: int) -> int:
        """How many instances a RunInstances asking for `requested` makes."""
        if requested > 1 and self._draw(self.settings.partial_run_rate):
            return self.random.randint(1, requested - 1)
        return requested

    def launched(self, records: list[InstanceRecord], requested: int) -> None:
        """Note a partial run; doom a share of the new instances to end in LAUNCH_FAILED."""
        if len(records) < requested:
            self.counters.partial_runs.append(
                {
                    "Requested": requested,
                    "Created": len(records),
                    "InstanceIds": [r.instance_id for r in records],
                }
            )
        for r in records:
            if self._draw(self.settings.launch_failed_rate):
                r.next_state = LAUNCH_FAILED
                self.counters.launch_failures.append(r.instance_id)

    # -- a listing that lags ---------------------------------------------------------------
    def departing(self, record: InstanceRecord, at: float) -> None:
        """`record` leaves the listing at `at`: keep how it looks now, while the lag shows it."""
        if self.settings.listing_lag_seconds > 0:
            self._departed[record.instance_id] = _Departure(at, record.model_copy(deep=True))

    def listing(
        self, live: list[InstanceRecord], region: str, account: str, now: float
    ) -> list[InstanceRecord]:
        """What DescribeInstances shows of `live` (the region's instances of `account`): with a
        lag of S seconds, not an instance younger than S, and one that left less than S ago as
        it was before it went (a copy, not the world's record), oldest first."""
        lag = self.settings.listing_lag_seconds
        if lag <= 0:
            return live
        horizon = now - lag
        for instance_id in [i for i, d in self._departed.items() if d.at <= horizon]:
            del self._departed[instance_id]
        shown: list[InstanceRecord] = []
        seen: set[str] = set()
        for record in live:
            seen.add(record.instance_id)
            departure = self._departed.get(record.instance_id)
            listed = departure.before if departure is not None and departure.at <= now else record
            if listed.created <= horizon:
                shown.append(listed)
        for instance_id, departure in self._departed.items():
            before = departure.before
            if (
                instance_id not in seen
                and before.region == region
                and before.account == account
                and departure.at <= now
                and before.created <= horizon
            ):
                shown.append(before)
        shown.sort(key=lambda r: r.created)
        return shown


def drop_connection(transport: asyncio.BaseTransport | None) -> None:
    """Close the connection at once with a reset, no answer sent: what the client of a call
    whose answer was lost sees (a real network's timeout ends the same way for it)."""
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    if isinstance(transport, asyncio.Transport):
        transport.abort()
    else:
        transport.close()
