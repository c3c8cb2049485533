"""The fleet probe, token buckets and cloud error classes: pure logic, fake cloud listings."""

import asyncio
from collections.abc import Callable

import pytest
from pydantic import SecretStr
from spotpool_operator.fleet import FleetProbe, ProbeSettings

from spotpool.engine import cloud_errors
from spotpool.engine.cloud import FleetInstance
from spotpool.engine.credentials import Credentials
from spotpool.engine.ratelimit import Buckets, RateLimits, TokenBucket

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
    assert probe.tick() == 1.0  # a small fleet: every second
    next(iter(probe._groups.values())).instances = 2000  # 20 pages of 100
    assert probe.tick() == 20.0
    probe.settings = ProbeSettings(budget=1 / 3)
    assert probe.tick() == pytest.approx(60.0)  # 20 calls a minute


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
