"""A paused VM (or a suspended laptop) must not wake up holding a Lease: the Lease is timed on
a clock that keeps counting through the pause (CLOCK_BOOTTIME), not on CLOCK_MONOTONIC, which
stands still on Linux while the VM is paused."""

import time

import pytest
from spotpool_operator.replicas import lease as lease_module
from spotpool_operator.replicas.lease import OperatorLease
from spotpool_operator.replicas.shards import ShardLeases

from tests.operator.lease_fakes import FakeLeases

pytestmark = pytest.mark.unit

D = 6.0


class PausableMachine:
    """The kernel's two clocks: a pause advances BOOTTIME only, as Linux does for a VM that
    was paused or suspended."""

    def __init__(self) -> None:
        self.monotonic = 1000.0
        self.boottime = 5000.0

    def run(self, seconds: float) -> None:
        self.monotonic += seconds
        self.boottime += seconds

    def pause(self, seconds: float) -> None:
        self.boottime += seconds

    def clock_gettime(self, clock: int) -> float:
        if clock == getattr(time, "CLOCK_BOOTTIME", -1):
            return self.boottime
        return self.monotonic


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> PausableMachine:
    # The operator runs on Linux only, where CLOCK_BOOTTIME always exists: no skip.
    assert hasattr(time, "CLOCK_BOOTTIME"), "CLOCK_BOOTTIME is Linux's: run the tests on Linux"
    fake = PausableMachine()
    monkeypatch.setattr(time, "clock_gettime", fake.clock_gettime)
    monkeypatch.setattr(time, "monotonic", lambda: fake.monotonic)
    return fake


def test_a_lease_is_not_held_after_a_pause_longer_than_its_margin(
    machine: PausableMachine,
) -> None:
    lease = OperatorLease(FakeLeases(), "ops", "op", D, "pod-a")  # the default clock
    assert lease.step() and lease.held()
    machine.run(D / 3)
    assert lease.held()
    machine.pause(D)  # the VM is frozen for a whole duration: another replica took over
    assert not lease.held()


def test_a_shards_leases_are_timed_on_the_suspend_counting_clock(
    machine: PausableMachine,
) -> None:
    shards = ShardLeases(FakeLeases(), "ops", "op", 2, D, hostname="pod-a")
    for shard in shards.leases:
        assert shard.step() and shard.held()
    machine.pause(D)
    assert not any(shard.held() for shard in shards.leases)


def test_the_lease_clock_counts_what_the_monotonic_clock_misses(
    machine: PausableMachine,
) -> None:
    before = lease_module.lease_clock()
    machine.pause(30.0)
    assert lease_module.lease_clock() - before == 30.0
