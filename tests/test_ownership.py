"""The lock decision (engine/ownership.py): every branch."""

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from spotpool.engine.ownership import LockOwner, Writer, decide_lock

ACQUIRED = datetime(2026, 11, 24, 4, 0, tzinfo=UTC)
BEFORE, AFTER = ACQUIRED - timedelta(minutes=1), ACQUIRED + timedelta(minutes=1)


@dataclass
class Lease:
    holding: bool = True
    earlier: frozenset[str] = field(default_factory=frozenset)

    def held(self) -> bool:
        return self.holding

    def acquired_at(self) -> datetime:
        return ACQUIRED

    def earlier_holders(self) -> frozenset[str]:
        return self.earlier


def lock(host: str, pid: int | None = 4242, when: datetime | None = BEFORE) -> LockOwner:
    return LockOwner(key="k", hostname=host, pid=pid, username="root", timestamp=when)


def dead(_: int) -> bool:
    return False


def alive(_: int) -> bool:
    return True


def test_an_earlier_lease_holders_lock_from_before_we_acquired_is_broken() -> None:
    writer = Writer("pod-b", 1, Lease(earlier=frozenset({"pod-a"})))
    decision = decide_lock(lock("pod-a"), writer, alive)  # its pid means nothing here
    assert decision.break_it and "earlier holder" in decision.reason


def test_our_own_hostname_from_an_earlier_container_is_broken_even_with_a_reused_pid() -> None:
    writer = Writer("pod-a", 1, Lease(earlier=frozenset({"pod-a"})))
    assert decide_lock(lock("pod-a", pid=1), writer, alive).break_it


@pytest.mark.parametrize("when", [AFTER, None])
def test_another_hosts_earlier_holder_lock_is_broken_whatever_its_clock_says(
    when: datetime | None,
) -> None:
    """Its clock may run 15 s ahead of ours (or behind): no two nodes' clocks are compared.
    Its runs were dead before we could take the Lease over (operator lease.py, shards.py)."""
    writer = Writer("pod-b", 1, Lease(earlier=frozenset({"pod-a"})))
    assert decide_lock(lock("pod-a", when=when), writer, alive).break_it


@pytest.mark.parametrize("when", [AFTER, None])
def test_our_own_hosts_lock_after_we_acquired_or_without_a_time_is_kept(
    when: datetime | None,
) -> None:
    writer = Writer("pod-a", 1, Lease(earlier=frozenset({"pod-a"})))
    assert not decide_lock(lock("pod-a", when=when), writer, alive).break_it


def test_a_person_s_lock_is_never_broken() -> None:
    writer = Writer("pod-b", 1, Lease(earlier=frozenset({"pod-a"})))
    decision = decide_lock(lock("laptop", pid=99), writer, dead)
    assert not decision.break_it and "may still be running" in decision.reason


def test_without_holding_the_lease_nothing_is_broken() -> None:
    writer = Writer("pod-b", 1, Lease(holding=False, earlier=frozenset({"pod-a"})))
    decision = decide_lock(lock("pod-a"), writer, dead)
    assert not decision.break_it and "Lease" in decision.reason


@pytest.mark.parametrize("lease", [None, Lease()])
def test_a_dead_process_of_this_host_is_broken(lease: Lease | None) -> None:
    writer = Writer("pod-b", 1, lease)
    assert decide_lock(lock("pod-b", when=AFTER), writer, dead).break_it


@pytest.mark.parametrize("lease", [None, Lease()])
def test_a_live_process_of_this_host_is_kept(lease: Lease | None) -> None:
    assert not decide_lock(lock("pod-b", when=AFTER), Writer("pod-b", 1, lease), alive).break_it


def test_by_hand_another_hosts_lock_is_kept_even_if_its_pid_is_free_here() -> None:
    assert not decide_lock(lock("other"), Writer("pod-b", 1, None), dead).break_it


def test_a_lock_naming_our_own_pid_or_no_pid_is_kept() -> None:
    writer = Writer("pod-b", 4242, None)
    assert not decide_lock(lock("pod-b", pid=4242), writer, dead).break_it
    assert not decide_lock(lock("pod-b", pid=None), writer, dead).break_it


def test_go_timestamps_parse() -> None:
    parsed = LockOwner.parse(
        "k", {"pid": 7, "hostname": "h", "timestamp": "2026-11-24T04:20:00.123456789+08:00"}
    )
    assert parsed.timestamp == datetime(2026, 11, 23, 20, 20, 0, 123456, tzinfo=UTC)
    assert LockOwner.parse("k", {"timestamp": "garbage"}).timestamp is None
    assert LockOwner.parse("k", {"timestamp": "2026-11-24T04:20:00Z"}).timestamp == datetime(
        2026, 11, 24, 4, 20, tzinfo=UTC
    )
