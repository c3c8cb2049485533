"""Tencent Cloud's per-action request limits, enforced when switched on (off by default).

The real API counts calls per action, per region and per (sub-)account, and answers
`RequestLimitExceeded` over the limit (product docs 213/568): RunInstances 10/s,
DescribeInstances 40/s, TerminateInstances 10/s, InquiryPriceRunInstances 10/s; other actions
20/s. The emulator models each limit as a token bucket per (account, region, service, action)
holding one second's worth of calls and refilled at the limit's rate: a burst of N calls
passes at once, then N a second. A refused call is not counted (it costs no token).
"""

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_RATES: dict[str, float] = {
    "RunInstances": 10.0,
    "DescribeInstances": 40.0,
    "TerminateInstances": 10.0,
    "InquiryPriceRunInstances": 10.0,
}
OTHER_RATE = 20.0
MESSAGE = "Your request frequency has exceeded the limit."


class LimitSettings(BaseModel):
    """What `/_emulator/rate-limits` takes and answers (PascalCase, as the admin routes)."""

    model_config = ConfigDict(populate_by_name=True)
    enabled: bool = Field(False, alias="Enabled")
    rates: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_RATES), alias="Rates")
    other: float = Field(OTHER_RATE, gt=0, alias="Other")

    def rate_of(self, action: str) -> float:
        return self.rates.get(action, self.other)


@dataclass
class _Bucket:
    rate: float
    tokens: float
    stamp: float


@dataclass
class RequestLimits:
    """The switch and its buckets. Runs inside the server's event loop: no locks needed."""

    settings: LimitSettings = field(default_factory=LimitSettings)
    _buckets: dict[tuple[str, str, str, str], _Bucket] = field(default_factory=dict)
    refused: int = 0  # calls answered RequestLimitExceeded since the switch went on

    def configure(self, settings: LimitSettings) -> None:
        self.settings = settings
        self._buckets.clear()  # start every bucket full at its new rate
        self.refused = 0

    def admit(self, secret_id: str, region: str, service: str, action: str, now: float) -> bool:
        """Whether this call is within its limit (taking a token if so); always when off."""
        if not self.settings.enabled:
            return True
        rate = self.settings.rate_of(action)
        key = (secret_id, region, service, action)
        bucket = self._buckets.get(key)
        if bucket is None or bucket.rate != rate:
            bucket = self._buckets[key] = _Bucket(rate=rate, tokens=max(1.0, rate), stamp=now)
        bucket.tokens = min(max(1.0, rate), bucket.tokens + (now - bucket.stamp) * rate)
        bucket.stamp = now
        if bucket.tokens < 1.0:
            self.refused += 1
            return False
        bucket.tokens -= 1.0
        return True

    def describe(self) -> dict[str, object]:
        return {**self.settings.model_dump(by_alias=True), "Refused": self.refused}
