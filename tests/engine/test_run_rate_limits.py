"""The provider's calls inside a Pulumi run keep to the account's token buckets, for real: a
pool's first up (every RunInstances at once, as a storm's replacements) against the emulator's
request log never goes over burst + rate x window, the provider's and our own SDK's calls
counted together, and every request's TC3 signature still verifies through the proxy."""

import time
from collections.abc import Iterator

import pytest

from spotpool.engine.tencent.ratelimit import BUCKETS, DEFAULT_RATES, RateLimits
from tests._support.buckets import most_over_bucket
from tests.engine.conftest import EngineWorld

pytestmark = pytest.mark.integration
LIMITS = {"RunInstances": 2.0, "DescribeInstances": 4.0}
INSTANCES = 8


@pytest.fixture
def low_limits() -> Iterator[None]:
    BUCKETS.configure(RateLimits(rates={**DEFAULT_RATES, **LIMITS}))
    try:
        yield
    finally:
        BUCKETS.configure(RateLimits())


def test_a_runs_run_instances_keep_to_the_accounts_rate(
    world: EngineWorld, low_limits: None
) -> None:
    stack = world.pool()
    started = time.monotonic()
    result = stack.up(world.config(stack, INSTANCES))
    seconds = time.monotonic() - started

    assert len(result.instances) == INSTANCES
    calls = world.emulator.admin_ok("GET", "/_emulator/requests")["Requests"]
    assert all(c["Code"] == "OK" for c in calls if c["Action"] == "RunInstances")  # signed right
    provider = [c for c in calls if not str(c["Client"]).startswith("SDK_PYTHON")]
    assert sum(c["Action"] == "RunInstances" for c in provider) == INSTANCES
    for action, rate in LIMITS.items():
        times = sorted(c["Time"] for c in calls if c["Action"] == action)
        worst = most_over_bucket(times, rate, burst=rate)
        print(f"{action}: {len(times)} calls, worst {worst:.2f} over; up {seconds:.1f} s")
        assert worst <= 1, f"{action}: {worst:.1f} calls over a {rate}/s bucket"
