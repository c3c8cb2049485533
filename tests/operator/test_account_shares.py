"""Sharing one cloud account across replicas: the engine-slot shares and the API buckets add up
to at most the account's limits whatever the replica count, a change of replica count keeps
each bucket's fill, and a failing fleet probe backs off instead of refreshing every pool."""

import asyncio
import itertools
from pathlib import Path

import pytest
from spotpool_operator.basics.failures import PoolProblem
from spotpool_operator.cloud.fleet import FleetProbe, ProbeSettings
from spotpool_operator.convergence.slots import EngineSlots, Priority

from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.ratelimit import Buckets, RateLimits, TokenBucket
from tests.operator.fakes import make_world, pool_body, ref, run, settings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("limit", [1, 3, 8])
def test_the_replicas_shares_never_add_up_to_more_than_the_account_limit(
    tmp_path: Path, limit: int
) -> None:
    configured = settings(tmp_path, max_concurrent_per_account=limit)
    for replicas in range(1, 21):
        share = configured.account_share(replicas)
        assert share is not None and share > 0, replicas  # every replica makes progress
        assert share * replicas <= limit + 1e-9, (replicas, share)
    assert configured.account_share(1) == limit
    assert settings(tmp_path, max_concurrent_per_account=0).account_share(20) is None


def test_a_share_below_one_operation_is_kept_on_average() -> None:
    """20 replicas on a bound of 8: one operation at a time, resting 1.5x its length after."""
    now = [0.0]
    slots = EngineSlots(total=4, per_account=8 / 20, clock=lambda: now[0])
    started: list[float] = []

    async def operation() -> None:
        async with slots.take(Priority.UPDATE, "account"):
            started.append(now[0])
            now[0] += 2.0  # each takes 2 s
            await asyncio.sleep(0)

    async def scenario() -> None:
        tasks = [asyncio.create_task(operation()) for _ in range(3)]
        for _ in range(400):  # the fake clock runs 50x faster than the loop's timers
            if all(task.done() for task in tasks):
                break
            await asyncio.sleep(0.01)
            now[0] += 0.5
        await asyncio.gather(*tasks)

    run(scenario())
    assert len(started) == 3
    gaps = [b - a for a, b in itertools.pairwise(started)]
    # 2 s busy out of every 5 s at least: 0.4 of one operation, 8 across 20 replicas.
    assert all(gap >= 5.0 for gap in gaps), gaps


def test_the_replicas_bursts_add_up_to_the_accounts() -> None:
    for replicas in range(1, 21):
        limits = RateLimits(share=1 / replicas)
        for action in ("RunInstances", "DescribeInstances", "AnythingElse"):
            full = RateLimits().burst_of(action)
            assert limits.burst_of(action) * replicas == pytest.approx(full)
            assert limits.rate_of(action) * replicas == pytest.approx(RateLimits().rate_of(action))


def test_a_new_replica_count_keeps_each_buckets_fill_scaled() -> None:
    now = [0.0]
    bucket = TokenBucket(10.0, 10.0, clock=lambda: now[0])
    for _ in range(8):
        bucket.reserve()  # 2 of 10 left
    bucket.retune(5.0, 5.0)  # a second replica came
    assert bucket.fill() == pytest.approx(0.2)  # 1 of 5: not a full burst again
    bucket.retune(10.0, 10.0)  # it went
    assert bucket.fill() == pytest.approx(0.2)

    buckets = Buckets(RateLimits())
    used = buckets.bucket("AKID", "ap-singapore", "RunInstances")
    for _ in range(10):
        used.reserve()  # drained
    buckets.configure(RateLimits(share=0.5))
    assert buckets.bucket("AKID", "ap-singapore", "RunInstances") is used
    assert used.rate == 5.0 and used.burst == 5.0
    assert used.fill() < 0.05  # still (about) empty: the change refilled nothing


def test_a_failing_probe_backs_off_exponentially_up_to_its_cap() -> None:
    probe = FleetProbe(lambda c, r: [], ProbeSettings(min_tick=1.0, max_backoff=60.0))
    assert [probe.backoff(n) for n in range(8)] == [0, 2, 4, 8, 16, 32, 60, 60]


def test_pools_back_off_with_a_failing_probe_instead_of_refreshing(tmp_path: Path) -> None:
    world = make_world(tmp_path, quick_check=True)
    run(world.reconciler.converge(ref(pool_body())))

    def failing(credentials: Credentials, region: str) -> list[object]:
        raise ConnectionError("the cloud API is down")

    probe = FleetProbe(failing, ProbeSettings(min_tick=1.0, max_backoff=60.0))  # type: ignore[arg-type]
    world.reconciler.probe = probe
    creds = Credentials.model_validate({"secret_id": "AKIDfromsecret", "secret_key": "k"})
    probe.watch("uid-gpu", creds, "ap-singapore", {0: "ins-1"}, lambda gone: None)
    (key,) = probe._groups
    assert not run(probe.look(key, probe._groups[key]))  # the look failed
    assert 0 < probe.failing("uid-gpu") <= 2.0
    calls = list(world.cloud.calls)

    with pytest.raises(PoolProblem) as raised:
        run(world.reconciler.check_reclaims(ref(pool_body())))

    assert raised.value.reason == "CloudCheckFailed"
    assert world.cloud.calls == calls  # no look of its own, no refresh


def test_a_failed_quick_check_backs_off_instead_of_a_full_refresh(tmp_path: Path) -> None:
    world = make_world(tmp_path, quick_check=True)
    run(world.reconciler.converge(ref(pool_body())))

    def broken(*_: object) -> set[str]:
        raise ConnectionError("the cloud API is down")

    world.reconciler.cloud_lookup = broken
    with pytest.raises(PoolProblem) as raised:
        run(world.reconciler.check_reclaims(ref(pool_body())))
    assert raised.value.reason == "CloudCheckFailed"
    assert ("refresh", "team-a.gpu") not in world.cloud.calls
