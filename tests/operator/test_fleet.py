"""The fleet probe, token buckets and cloud error classes: pure logic, fake cloud listings."""

import asyncio
from collections.abc import Callable

import pytest
from pydantic import SecretStr
from spotpool_operator.cloud.fleet import FleetProbe, ProbeSettings

from spotpool.engine.tencent import cloud_errors
from spotpool.engine.tencent.cloud import FleetInstance
from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.ratelimit import Buckets, RateLimits, TokenBucket

pytestmark = pytest.mark.unit

KEYS = Credentials(secret_id=SecretStr("AKIDone"), secret_key=SecretStr("key-one"))
OTHER_KEYS = Credentials(secret_id=SecretStr("AKIDtwo"), secret_key=SecretStr("key-two"))


def instance(uid: str, instance_id: str, slot: int, state: str = "RUNNING") -> FleetInstance:
    return FleetInstance(
        instance_id=instance_id, slot=slot, state=state, instance_type="GN7", zone="z",
        pool_uid=uid,
    )  # fmt: skip


class FakeCloud:
    def __init__(self) -> None:
        self.instances: list[FleetInstance] = []
        self.calls: list[tuple[str, str]] = []
        self.fail: Exception | None = None

    def list(self, credentials: Credentials, region: str) -> list[FleetInstance]:
        self.calls.append((credentials.secret_id.get_secret_value(), region))
        if self.fail is not None:
            raise self.fail
        return list(self.instances)


def recorder() -> tuple[list[set[int]], Callable[[set[int]], None]]:
    seen: list[set[int]] = []
    return seen, seen.append


def test_one_sweep_serves_every_pool_on_the_same_keys_and_region() -> None:
    cloud = FakeCloud()
    cloud.instances = [instance("a", "ins-a0", 0), instance("a", "ins-a1", 1)]
    cloud.instances += [instance("b", "ins-b0", 0)]
    probe = FleetProbe(cloud.list)
    seen_a, notify_a = recorder()
    seen_b, notify_b = recorder()
    probe.watch("a", KEYS, "r1", {0: "ins-a0", 1: "ins-a1"}, notify_a)
    probe.watch("b", KEYS, "r1", {0: "ins-b0"}, notify_b)
    cloud.instances = [i for i in cloud.instances if i.instance_id != "ins-a1"]
    cloud.instances.append(instance("b", "ins-b0", 0, state="TERMINATING"))
    cloud.instances = [
        i for i in cloud.instances if not (i.instance_id == "ins-b0" and i.state == "RUNNING")
    ]

    async def sweep_all() -> None:
        for key, group in list(probe._groups.items()):
            assert await probe.sweep(key, group)

    asyncio.run(sweep_all())
    assert cloud.calls == [("AKIDone", "r1")]  # one call for both pools
    assert seen_a == [{1}] and seen_b == [{0}]
    asyncio.run(sweep_all())  # told once per instance, not on every sweep
    assert seen_a == [{1}] and seen_b == [{0}]


def test_pools_on_other_keys_or_regions_get_their_own_sweep() -> None:
    cloud = FakeCloud()
    probe = FleetProbe(cloud.list)
    probe.watch("a", KEYS, "r1", {}, lambda _: None)
    probe.watch("b", OTHER_KEYS, "r1", {}, lambda _: None)
    probe.watch("c", KEYS, "r2", {}, lambda _: None)

    async def sweep_all() -> None:
        for key, group in list(probe._groups.items()):
            await probe.sweep(key, group)

    asyncio.run(sweep_all())
    assert sorted(cloud.calls) == [("AKIDone", "r1"), ("AKIDone", "r2"), ("AKIDtwo", "r1")]
    probe.unwatch("b")
    cloud.calls.clear()
    asyncio.run(sweep_all())
    assert sorted(cloud.calls) == [("AKIDone", "r1"), ("AKIDone", "r2")]


def test_a_failed_sweep_tells_nothing_and_reports_failure() -> None:
    cloud = FakeCloud()
    cloud.fail = RuntimeError("RequestLimitExceeded")
    probe = FleetProbe(cloud.list)
    seen, notify = recorder()
    probe.watch("a", KEYS, "r1", {0: "ins-a0"}, notify)
    (key, group), = probe._groups.items()  # fmt: skip
    assert asyncio.run(probe.sweep(key, group)) is False
    assert seen == [] and probe.failures == 1


def test_the_tick_follows_the_budget_not_the_pool_count() -> None:
    probe = FleetProbe(FakeCloud().list, ProbeSettings(budget=1.0, min_tick=1.0))
    probe.watch("a", KEYS, "r1", {}, lambda _: None)
    (group,) = probe._groups.values()
    assert probe.tick(group) == 1.0  # a small fleet: every second
    group.instances = 2000  # 20 pages of 100
    assert probe.tick(group) == pytest.approx(20**0.5)  # every 4.5 s: 13 calls a minute
    assert 60 / probe.tick(group) <= 20


def test_each_account_has_a_budget_of_its_own() -> None:
    """The cloud's limits are per account and region: a second account's fleet neither
    slows the first's looks nor spends its saved calls."""
    probe = FleetProbe(FakeCloud().list, ProbeSettings(budget=1.0, min_tick=1.0))
    other = Credentials.model_validate({"secret_id": "AKIDother", "secret_key": "k"})
    probe.watch("a", KEYS, "r1", {}, lambda _: None)
    probe.watch("b", other, "r1", {}, lambda _: None)
    first, second = probe._groups.values()
    first.instances = second.instances = 2000
    assert probe.tick(first) == probe.tick(second) == pytest.approx(20**0.5)
    now = first.saved_at + 60.0  # both quiet for a minute: a sweep each saved up
    assert probe.pay(first, 21, now) == 0.0
    assert probe.pay(second, 21, now) == 0.0  # the first's storm sweep took nothing of it
    assert probe.pay(first, 21, now) == pytest.approx(21.0)


def big_fleet(cloud: FakeCloud, pools: int) -> dict[str, dict[int, str]]:
    """`pools` pools of two running instances each, as the cloud lists them."""
    expected: dict[str, dict[int, str]] = {}
    for p in range(pools):
        expected[f"p{p}"] = {0: f"ins-{p}-0", 1: f"ins-{p}-1"}
        cloud.instances += [instance(f"p{p}", f"ins-{p}-{s}", s) for s in (0, 1)]
    return expected


def test_a_large_idle_fleet_costs_one_count_a_look_and_a_sweep_only_when_it_moved() -> None:
    cloud = FakeCloud()
    counts: list[str] = []

    def count(credentials: Credentials, region: str) -> int:
        counts.append(region)
        return sum(1 for i in cloud.instances if i.state == "RUNNING")

    probe = FleetProbe(cloud.list, counter=count)
    told: dict[str, set[int]] = {}

    def teller(uid: str) -> Callable[[set[int]], None]:
        return lambda slots: told.update({uid: slots})

    for uid, expected in big_fleet(cloud, 1000).items():
        probe.watch(uid, KEYS, "r1", expected, teller(uid))
    (key, group), = probe._groups.items()  # fmt: skip

    async def looks(n: int) -> None:
        for _ in range(n):
            assert await probe.look(key, group)

    asyncio.run(looks(1))  # the pools just registered: a whole sweep, 20 pages
    assert (probe.sweeps, probe.counts, probe.calls) == (1, 0, 20)
    asyncio.run(looks(10))  # idle: one count a look
    assert (probe.sweeps, probe.counts, probe.calls) == (1, 10, 30)
    assert told == {} and probe.vouches_for("p7", within=5.0)
    cloud.instances = [i for i in cloud.instances if i.instance_id != "ins-7-1"]  # reclaimed
    asyncio.run(looks(1))  # the count dropped: a sweep finds which
    assert told == {"p7": {1}} and probe.sweeps == 2
    probe.watch("p7", KEYS, "r1", {0: "ins-7-0", 1: "ins-7-9"}, lambda _: None)
    cloud.instances.append(instance("p7", "ins-7-9", 1))
    asyncio.run(looks(2))  # a pool's instances changed: one sweep, then counts again
    assert probe.sweeps == 3 and probe.counts == 12


def test_a_small_fleet_is_swept_whole_each_look_without_counting() -> None:
    cloud = FakeCloud()
    probe = FleetProbe(cloud.list, counter=lambda c, r: pytest.fail("counted"))
    for uid, expected in big_fleet(cloud, 10).items():
        probe.watch(uid, KEYS, "r1", expected, lambda _: None)
    (key, group), = probe._groups.items()  # fmt: skip
    for _ in range(3):
        assert asyncio.run(probe.look(key, group))
    assert (probe.sweeps, probe.calls) == (3, 3)


def test_a_failed_count_reports_failure_and_vouches_for_nothing() -> None:
    cloud = FakeCloud()

    def count(credentials: Credentials, region: str) -> int:
        raise RuntimeError("RequestLimitExceeded")

    probe = FleetProbe(cloud.list, counter=count)
    for uid, expected in big_fleet(cloud, 100).items():
        probe.watch(uid, KEYS, "r1", expected, lambda _: None)
    (key, group), = probe._groups.items()  # fmt: skip
    assert asyncio.run(probe.look(key, group))  # first a sweep
    group.verified -= 100  # long ago
    assert asyncio.run(probe.look(key, group)) is False
    assert probe.failures == 1 and not probe.vouches_for("p1", within=10.0)


def test_token_bucket_holds_the_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=10.0, clock=lambda: now[0])
    waits = [bucket.reserve() for _ in range(30)]
    assert waits[:10] == [0.0] * 10  # the burst
    assert waits[-1] == pytest.approx(2.0)  # 20 more at 10/s
    now[0] = 10.0
    assert bucket.reserve() == 0.0


def test_buckets_are_per_key_region_and_action() -> None:
    buckets = Buckets(RateLimits(share=0.5))
    first = buckets.bucket("AKID1", "r1", "DescribeInstances")
    assert first is buckets.bucket("AKID1", "r1", "DescribeInstances")
    assert first is not buckets.bucket("AKID1", "r2", "DescribeInstances")
    assert first.rate == 20.0
    assert buckets.bucket("AKID1", "r1", "RunInstances").rate == 5.0


@pytest.mark.parametrize(
    "code",
    [
        "ResourceInsufficient.SpecifiedInstanceType",
        "ResourceInsufficient.ZoneSoldOutForSpecifiedInstance",
        "ResourceInsufficient.AvailabilityZoneSoldOut",
        "ResourcesSoldOut.SpecifiedInstanceType",
        "ResourcesSoldOut.AvailableZone",
        "InvalidParameterValue.InsufficientOffering",
    ],
)
def test_no_stock_codes(code: str) -> None:
    message = f"[TencentCloudSDKError] Code={code}, Message=sold out, RequestId=1"
    assert cloud_errors.is_no_stock(message)


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("ResourceInsufficient.CloudDiskUnavailable", cloud_errors.Kind.UNKNOWN),
        ("ResourceInsufficient.CidrBlock", cloud_errors.Kind.UNKNOWN),
        ("LimitExceeded.SpotQuota", cloud_errors.Kind.QUOTA),
        ("RequestLimitExceeded", cloud_errors.Kind.THROTTLED),
        ("AuthFailure.SignatureFailure", cloud_errors.Kind.AUTH),
        ("InvalidParameterValue.InsufficientPrice", cloud_errors.Kind.INVALID),
    ],
)
def test_other_codes_are_not_mistaken_for_no_stock(code: str, kind: cloud_errors.Kind) -> None:
    assert cloud_errors.classify_code(code).kind is kind
    assert not cloud_errors.is_no_stock(f"Code={code}")


EMULATOR_CODES = [
    "MissingParameter", "InvalidFilter", "InvalidParameter", "UnsupportedRegion",
    "ResourceNotFound", "InvalidParameterCombination", "InvalidImageId.Malformed",
    "DryRunOperation", "AuthFailure.SignatureFailure", "AuthFailure.SecretIdNotFound",
    "AuthFailure.SignatureExpire", "InternalError", "InvalidAction", "InvalidInstanceId.Malformed",
    "InvalidInstanceId.NotFound", "InvalidParameterValue",
    "InvalidParameterValue.InstanceTypeNotFound", "InvalidParameterValue.ResourceDescriptionError",
    "InvalidZone.MismatchRegion", "RequestLimitExceeded",
    "ResourceInsufficient.SpecifiedInstanceType",
]  # fmt: skip


@pytest.mark.parametrize("code", EMULATOR_CODES)
def test_every_code_the_emulator_answers_is_classified(code: str) -> None:
    assert cloud_errors.classify_code(code).kind is not cloud_errors.Kind.UNKNOWN


def test_a_quiet_fleet_saves_up_a_sweep_and_a_burst_of_sweeps_pays_it_back() -> None:
    probe = FleetProbe(FakeCloud().list, ProbeSettings(budget=1.0, min_tick=1.0))
    probe.watch("a", KEYS, "r1", {}, lambda _: None)
    (group,) = probe._groups.values()
    group.instances = 2000  # a sweep: 20 calls
    now = group.saved_at
    assert probe.pay(group, 21, now) == pytest.approx(21.0)  # nothing saved: 21 s to pay back
    now += 21.0
    for _ in range(1, 20):  # a quiet fleet: one count a tick (4.5 s)
        now += probe.tick(group)
        assert probe.pay(group, 1, now) == 0.0
    now += probe.tick(group)
    assert probe.pay(group, 21, now) == 0.0  # the storm's sweep goes at once...
    assert probe.pay(group, 21, now) == pytest.approx(21.0)  # ...the next waits to be paid
    calls, start = 0, now
    while now - start < 600:  # sweeping as often as allowed: the budget holds on average
        now += max(probe.tick(group), probe.pay(group, 21, now))
        calls += 21
    assert calls / (now - start) <= 1.0 + 21 / 600


def test_a_gone_slot_another_live_instance_of_the_pool_holds_is_told_as_held() -> None:
    """A status gone stale (a run cut short replaced slot 1 before its status was written):
    slot 1's listed instance is gone, but a live instance of the pool holds the slot."""
    cloud = FakeCloud()
    cloud.instances = [instance("a", "ins-new1", 1), instance("b", "ins-b0", 0)]
    probe = FleetProbe(cloud.list)
    seen, notify = recorder()
    held, tell_held = recorder()
    probe.watch("a", KEYS, "r1", {0: "ins-old0", 1: "ins-old1"}, notify, tell_held)

    async def sweep_all() -> None:
        for key, group in list(probe._groups.items()):
            assert await probe.sweep(key, group)

    asyncio.run(sweep_all())
    assert seen == [{0, 1}] and held == [{1}]  # pool b's slot 0 holds nothing of a's


def test_a_launch_the_listing_has_not_caught_up_with_is_not_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from spotpool.engine.tencent.recent_writes import RecentWrites

    recent = RecentWrites(bound=60)
    monkeypatch.setattr("spotpool_operator.cloud.fleet.RECENT", recent)
    cloud = FakeCloud()
    cloud.instances = [instance("a", "ins-a0", 0)]  # ins-a1 launched, not listed yet
    recent.launched(["ins-a1"])
    probe = FleetProbe(cloud.list)
    seen, notify = recorder()
    probe.watch("a", KEYS, "r1", {0: "ins-a0", 1: "ins-a1"}, notify)
    key, group = next(iter(probe._groups.items()))
    asyncio.run(probe.sweep(key, group))
    assert seen == []  # a lagging listing: not a reclaim
    recent.listed(["ins-a1"])  # the listing showed it once; now missing means gone
    asyncio.run(probe.sweep(key, group))
    assert seen == [{1}]
