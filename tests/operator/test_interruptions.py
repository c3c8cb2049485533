"""The operator's interruption learner: counts kept across a restart, two replicas writing the
same ConfigMap at once without losing counts, a notice and its reclaim counted once, and the
rates placement reads."""

from types import SimpleNamespace
from typing import Any

import kubernetes
import pytest
from spotpool_operator.cloud.interruptions import (
    ConfigMapStore,
    HourMeter,
    Learner,
    LearnerSettings,
    MemoryStore,
    parse,
)

from spotpool.api.interruptions import Tally

pytestmark = pytest.mark.unit

HOUR = 3600.0
KEY = ("acct", "ap-x", "ap-x-1", "GN7.2XLARGE32")
CALM = ("acct", "ap-x", "ap-x-2", "GN7.2XLARGE32")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class FakeConfigMaps:
    """read/create/replace of one ConfigMap with resourceVersion checks, like the API server;
    `race` lets another writer slip in between a read and the next replace."""

    def __init__(self) -> None:
        self.stored: dict[str, Any] | None = None
        self.version = 0
        self.race: list[dict[str, str]] = []
        self.conflicts = 0

    def read_namespaced_config_map(self, name: str, namespace: str) -> Any:
        if self.stored is None:
            raise kubernetes.client.ApiException(status=404)
        found = SimpleNamespace(
            data=dict(self.stored), metadata=SimpleNamespace(resource_version=str(self.version))
        )
        if self.race:  # someone else writes right after our read
            self.stored.update(self.race.pop(0))
            self.version += 1
        return found

    def create_namespaced_config_map(self, namespace: str, body: dict[str, Any]) -> None:
        if self.stored is not None:
            raise kubernetes.client.ApiException(status=409)
        self.stored, self.version = dict(body["data"]), 1

    def replace_namespaced_config_map(self, name: str, namespace: str, body: Any) -> None:
        if body.metadata.resource_version != str(self.version):
            self.conflicts += 1
            raise kubernetes.client.ApiException(status=409)
        self.stored, self.version = dict(body.data), self.version + 1


def learner(store: Any, writer: str, clock: Clock) -> Learner:
    return Learner(store, writer, LearnerSettings(half_life=HOUR), clock=clock)


def test_a_restart_under_the_same_name_keeps_its_counts() -> None:
    clock, store = Clock(), MemoryStore()
    first = learner(store, "pod-a", clock)
    first.interrupted(KEY, "ins-1")
    first.ran({KEY: 3.0})
    first.sync()

    again = learner(store, "pod-a", clock)
    again.interrupted(KEY, "ins-2")  # counted before it read the store: not lost either
    again.load()

    learned = again.learned()[KEY]
    assert (learned.interruptions, learned.hours) == (2.0, 3.0)
    again.sync()
    assert store.writers["pod-a"][KEY].interruptions == 2.0


def test_a_new_pod_counts_what_the_old_one_left_and_writes_its_own_key() -> None:
    clock, store = Clock(), MemoryStore()
    old = learner(store, "pod-a", clock)
    old.interrupted(KEY, "ins-1")
    old.sync()

    new = learner(store, "pod-b", clock)
    new.interrupted(KEY, "ins-2")
    new.sync()

    assert set(store.writers) == {"pod-a", "pod-b"}
    assert new.learned()[KEY].interruptions == 2.0


def test_counts_decay_with_the_half_life() -> None:
    clock = Clock()
    one = learner(MemoryStore(), "pod-a", clock)
    one.interrupted(KEY, "ins-1")
    one.ran({KEY: 4.0})
    clock.now += 2 * HOUR

    learned = one.learned()[KEY]
    assert (learned.interruptions, learned.hours) == pytest.approx((0.25, 1.0))


def test_a_notice_and_the_reclaim_of_the_same_instance_count_once() -> None:
    one = learner(MemoryStore(), "pod-a", Clock())

    assert one.interrupted(KEY, "ins-1") is True
    assert one.interrupted(KEY, "ins-1") is False
    assert one.learned()[KEY].interruptions == 1.0


def test_rates_are_per_account_and_region() -> None:
    one = learner(MemoryStore(), "pod-a", Clock())
    one.interrupted(KEY, "ins-1")
    one.interrupted(("other", "ap-x", "ap-x-1", "GN7.2XLARGE32"), "ins-2")
    one.ran({KEY: 1.0, CALM: 1.0})

    found = one.of("acct", "ap-x")
    assert set(found) == {("ap-x-1", "GN7.2XLARGE32"), ("ap-x-2", "GN7.2XLARGE32")}
    assert found[("ap-x-1", "GN7.2XLARGE32")].rate == pytest.approx(0.5)
    assert found[("ap-x-2", "GN7.2XLARGE32")].rate == 0.0


def test_two_replicas_writing_one_configmap_at_once_lose_no_count() -> None:
    clock, core = Clock(), FakeConfigMaps()
    store = ConfigMapStore(core, "spotpool-system", "spotpool-operator-interruptions")
    a, b = learner(store, "pod-a", clock), learner(store, "pod-b", clock)
    a.interrupted(KEY, "ins-1")
    a.sync()
    b.load()
    b.interrupted(KEY, "ins-2")
    b.interrupted(KEY, "ins-3")
    # pod-a writes again between pod-b's read and its write: pod-b's replace conflicts
    a.interrupted(KEY, "ins-4")
    core.race.append({"writer.pod-a": '{"acct/ap-x/ap-x-1/GN7.2XLARGE32": '
                      '{"interruptions": 2.0, "hours": 0.0, "at": 1000000.0}}'})  # fmt: skip
    b.sync()

    assert core.conflicts == 1
    writers = parse(core.stored or {})
    assert writers["pod-a"][KEY].interruptions == 2.0
    assert writers["pod-b"][KEY].interruptions == 2.0
    assert b.learned()[KEY].interruptions == 4.0


def test_long_silent_writers_are_dropped_and_unreadable_keys_skipped() -> None:
    clock = Clock()
    store = MemoryStore()
    store.writers["gone-pod"] = {KEY: Tally(interruptions=5, hours=1, at=clock.now - 30 * HOUR)}
    one = learner(store, "pod-a", clock)
    one.sync()

    assert "gone-pod" not in store.writers
    unreadable = {"writer.x": "not json", "other": "{}", "writer.y": '{"bad": {}}'}
    assert parse(unreadable) == {"y": {}}


def test_the_hour_meter_counts_instance_hours_between_looks() -> None:
    clock = Clock()
    meter = HourMeter(clock)
    assert meter.hours({KEY: 4}) == {}
    clock.now += 900
    assert meter.hours({KEY: 4}) == {KEY: pytest.approx(1.0)}


def test_reclaims_the_operator_sees_move_new_slots_to_the_calmer_zone_and_status_says_why() -> None:
    from pydantic import SecretStr
    from spotpool_operator.cloud.capacity import Capacity, CapacitySettings, account_of

    from spotpool.api.placement import Offering
    from spotpool.api.spec import ChargeType, SpotpoolSpec
    from spotpool.api.stackconfig import PoolIdentity, StackConfig
    from spotpool.api.status import Instance, Placement
    from spotpool.engine.tencent.credentials import Credentials

    cheap, calm, kind = "ap-singapore-2", "ap-singapore-3", "GN7.2XLARGE32"
    keys = Credentials(secret_id=SecretStr("AKIDx"), secret_key=SecretStr("k"))

    def lister(*_: Any) -> dict[Any, Offering]:
        rows = [(cheap, 0.6), (calm, 1.0)]
        found = [Offering.from_api(z, kind, "SPOTPAID", "SELL", "EnoughStock", p) for z, p in rows]
        return {o.key: o for o in found}

    spec = SpotpoolSpec.model_validate(
        {"region": "ap-singapore", "availabilityZones": [cheap, calm], "instanceType": kind,
         "maximum": 4, "replicas": 1, "imageId": "img-abc", "credentialsSecretRef": {"name": "c"}}
    )  # fmt: skip
    config = StackConfig.from_spec(PoolIdentity(namespace="n", name="p", uid="u"), spec)
    clock = Clock()
    one = learner(MemoryStore(), "pod-a", clock)
    capacity = Capacity(lister, CapacitySettings(avoid_seconds=0), learner=one)
    reports: list[Placement] = []

    assert capacity.plan(spec, config, {}, [0], keys, "ap-singapore").zone_of(0) == cheap

    account = account_of(keys, None)
    one.ran(
        {(account, "ap-singapore", cheap, kind): 2.0, (account, "ap-singapore", calm, kind): 2.0}
    )
    for n in range(6):  # 6 reclaims in 2 instance-hours: 2/h, 0.6 x 3 > 1.0
        gone = Instance(instance_id=f"ins-{n}", slot=0, zone=cheap, instance_type=kind)
        capacity.reclaimed([gone], ChargeType.SPOTPAID, (account, "ap-singapore"))

    placed = capacity.plan(spec, config, {}, [0], keys, "ap-singapore", on_report=reports.append)
    assert placed.zone_of(0) == calm
    (report,) = reports
    assert [o.zone for o in report.offerings] == [calm, cheap]
    assert report.offerings[1].interruption_rate == pytest.approx(2.0)
    assert report.message.startswith(f"new slots go to {calm} {kind}")
    # another account's reclaims say nothing of this one's
    other = Credentials(secret_id=SecretStr("AKIDother"), secret_key=SecretStr("k"))
    assert capacity.plan(spec, config, {}, [0], other, "ap-singapore").zone_of(0) == cheap
