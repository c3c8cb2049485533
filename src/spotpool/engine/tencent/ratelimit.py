"""Token buckets at Tencent Cloud's published API rate limits, one per (SecretId, region,
action), shared by every call this process makes, so that no burst of ours is answered with
`RequestLimitExceeded` (the limit is counted per API, region, sub-account)."""

import threading
import time
from collections.abc import Callable

from pydantic import BaseModel, Field

# Calls per second per API, region, sub-account (product docs 213/568).
DEFAULT_RATES = {"DescribeInstances": 40.0, "RunInstances": 10.0, "TerminateInstances": 10.0}
OTHER_ACTIONS_RATE = 20.0
CHECK_EVERY = 0.2  # seconds between two fence checks of a caller waiting for a token


class RateLimits(BaseModel):
    """Rates the buckets allow, in calls per second; `share` scales them all (a second
    install on the same account may take the rest)."""

    rates: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_RATES))
    other: float = OTHER_ACTIONS_RATE
    share: float = Field(1.0, gt=0, le=1)

    def rate_of(self, action: str) -> float:
        return self.rates.get(action, self.other) * self.share

    def burst_of(self, action: str) -> float:
        """A second's worth of calls, at least one, shared like the rate: the replicas' bursts
        add up to the account's (a share below one call waits for its fraction to fill)."""
        return max(1.0, self.rates.get(action, self.other)) * self.share


class TokenBucket:
    """`rate` tokens a second, at most `burst` saved up. Thread-safe; `take` blocks."""

    def __init__(
        self, rate: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst if burst is not None else max(1.0, rate)
        self._clock = clock
        self._tokens = self.burst
        self._stamp = clock()
        self._lock = threading.Lock()
        self.waited = 0.0  # seconds callers spent waiting, in all

    def retune(self, rate: float, burst: float) -> None:
        """New rate and burst (this replica's share changed), keeping the fill as a share of
        the burst: a change of replica count must not hand every replica a full burst."""
        with self._lock:
            self._refill()
            fill = self._tokens / self.burst
            self.rate, self.burst = rate, burst
            self._tokens = fill * burst

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def reserve(self) -> float:
        """Take one token now (going into debt if needed); returns how long to wait first."""
        with self._lock:
            self._refill()
            self._tokens -= 1.0
            wait = 0.0 if self._tokens >= 0 else -self._tokens / self.rate
            self.waited += wait
            return wait

    def take(self, check: Callable[[], None] | None = None) -> None:
        """Take a token, waiting for it. `check` (a writer's fence) is called during the wait
        and once more at its end, right before the call goes out: raising stops the wait (the
        token stays spent)."""
        wait = self.reserve()
        if check is None:
            if wait > 0:
                time.sleep(wait)
            return
        end = time.monotonic() + wait
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, CHECK_EVERY))
            check()
        check()

    def fill(self) -> float:
        """Share of the burst available now, 0..1 (for metrics)."""
        with self._lock:
            self._refill()
            return max(0.0, self._tokens) / self.burst


class Buckets:
    """The process's buckets, made on first use."""

    def __init__(self, limits: RateLimits | None = None) -> None:
        self.limits = limits or RateLimits()
        self._buckets: dict[tuple[str, str, str], TokenBucket] = {}
        self._lock = threading.Lock()

    def configure(self, limits: RateLimits) -> None:
        """New limits for every bucket, each keeping its current fill (scaled)."""
        with self._lock:
            self.limits = limits
            for (_, _, action), bucket in self._buckets.items():
                bucket.retune(limits.rate_of(action), limits.burst_of(action))

    def bucket(self, secret_id: str, region: str, action: str) -> TokenBucket:
        key = (secret_id, region, action)
        with self._lock:
            found = self._buckets.get(key)
            if found is None:
                found = self._buckets[key] = TokenBucket(
                    self.limits.rate_of(action), self.limits.burst_of(action)
                )
            return found

    def all(self) -> dict[tuple[str, str, str], TokenBucket]:
        with self._lock:
            return dict(self._buckets)


BUCKETS = Buckets()
