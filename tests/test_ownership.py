"""The lock decision (engine/fencing/ownership.py): every branch."""

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from spotpool.engine.fencing.ownership import InstallHosts, LockOwner, Writer, decide_lock

pytestmark = pytest.mark.unit

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


@dataclass
class ShardLease(Lease):
    """A shard's Lease that also reads every Lease of the install (operator shards.py)."""

    held_before: frozenset[str] = field(default_factory=frozenset)  # of any install Lease
    holding_now: frozenset[str] = field(default_factory=frozenset)
    reads: int = 0

    def install_hosts(self) -> InstallHosts:
        self.reads += 1
        return InstallHosts(self.held_before, self.holding_now | {"pod-b"})


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


@pytest.mark.parametrize("when", [BEFORE, AFTER, None])
def test_a_lock_of_a_holder_of_the_single_lease_of_before_shards_is_broken(
    when: datetime | None,
) -> None:
    """The upgrade to shards (or a change of `shards`): the lock's host held another Lease of
    this install, not this shard's, and holds none now: its runs are dead, whatever its clock."""
    lease = ShardLease(earlier=frozenset({"pod-b"}), held_before=frozenset({"old-pod"}))
    decision = decide_lock(lock("old-pod", when=when), Writer("pod-b", 1, lease), alive)
    assert decision.break_it and "holds none of them now" in decision.reason
    assert "earlier holder" in decision.reason


@pytest.mark.parametrize("now", [frozenset({"old-pod"}), frozenset({"old-pod", "pod-c"})])
def test_a_lock_of_a_host_holding_a_lease_of_the_install_now_is_kept(now: frozenset[str]) -> None:
    """It holds the single Lease, another shard or a live membership: it may be writing."""
    lease = ShardLease(held_before=frozenset({"old-pod"}), holding_now=now)
    decision = decide_lock(lock("old-pod"), Writer("pod-b", 1, lease), dead)
    assert not decision.break_it and "may still be running" in decision.reason


def test_a_host_that_never_held_a_lease_of_the_install_is_kept_and_nothing_read_unheld() -> None:
    lease = ShardLease(held_before=frozenset({"old-pod"}))
    assert not decide_lock(lock("laptop"), Writer("pod-b", 1, lease), dead).break_it
    assert not decide_lock(lock(""), Writer("pod-b", 1, lease), dead).break_it
    unheld = ShardLease(holding=False, held_before=frozenset({"old-pod"}))
    assert not decide_lock(lock("old-pod"), Writer("pod-b", 1, unheld), dead).break_it
    assert unheld.reads == 0  # no Lease held: nothing read, nothing broken


def test_our_own_hosts_lock_is_not_judged_by_the_install_s_leases() -> None:
    """This host holds Leases now: only the same-host rules (its pid, its time) apply."""
    lease = ShardLease(held_before=frozenset({"pod-b"}))
    assert not decide_lock(lock("pod-b", when=AFTER), Writer("pod-b", 1, lease), alive).break_it
    assert lease.reads == 0


def test_go_timestamps_parse() -> None:
    parsed = LockOwner.parse(
        "k", {"pid": 7, "hostname": "h", "timestamp": "2026-11-24T04:20:00.123456789+08:00"}
    )
    assert parsed.timestamp == datetime(2026, 11, 23, 20, 20, 0, 123456, tzinfo=UTC)
    assert LockOwner.parse("k", {"timestamp": "garbage"}).timestamp is None
    assert LockOwner.parse("k", {"timestamp": "2026-11-24T04:20:00Z"}).timestamp == datetime(
        2026, 11, 24, 4, 20, tzinfo=UTC
    )


def test_shard_leases_prove_the_killed_holder_of_the_single_lease_gone() -> None:
    """The upgrade on the operator's Leases (in-memory API server, clock moved by hand): a
    replica of before shards (`shards: 1`, the single Lease) is killed; a replica with shards
    under another hostname takes them once that Lease expired on its own clock, and proves the
    killed one gone for a pool of any shard; a live replica's lock is kept."""
    from spotpool_operator.replicas.shards import ShardLeases, ShardView

    from tests.operator.lease_fakes import FakeClock, FakeLeases

    server, clock = FakeLeases(), FakeClock()

    def replica(host: str, shards: int) -> ShardLeases:
        return ShardLeases(server, "ops", "op", shards, 6.0, host, monotonic=clock)

    old = replica("old-pod", 1)
    old.step()
    assert old.holds(0)
    new = replica("new-pod", 4)
    new.step()  # the single Lease is held by a live replica: no shard taken
    assert not any(new.holds(s) for s in range(4))
    view = new.view("some-pool-uid")
    assert not decide_lock(lock("old-pod"), Writer("new-pod", 1, view), dead).break_it
    # old-pod is killed: it renews nothing from now on
    for _ in range(4):
        clock.advance(2.0)
        new.step()
    assert all(new.holds(s) for s in range(4))
    assert "old-pod" not in view.earlier_holders()  # the shard's own history proves nothing
    decision = decide_lock(lock("old-pod", when=AFTER), Writer("new-pod", 1, view), alive)
    assert decision.break_it and "holds none of them now" in decision.reason
    assert not decide_lock(lock("laptop"), Writer("new-pod", 1, view), dead).break_it

    back = replica("old-pod", 4)  # the same hostname alive again: a member once it takes
    for _ in range(5):  # its membership Lease over (the dead one's expired on its clock)
        clock.advance(2.0)
        back.step()
        new.step()
    assert "old-pod" in new.install_hosts().current
    kept = ShardView(new, next(s for s in range(4) if new.holds(s)))  # a shard new still has
    decision = decide_lock(lock("old-pod"), Writer("new-pod", 1, kept), dead)
    assert not decision.break_it and "may still be running" in decision.reason


# --- the way out of any stale lock: older than any run, from before this holder's token ----
LIMIT = timedelta(minutes=30)  # the operation timeout
LONG_AGO = ACQUIRED - timedelta(hours=2)


def test_a_lock_of_a_host_fallen_off_every_holder_list_is_broken_once_older_than_any_run() -> None:
    writer = Writer("pod-b", 1, ShardLease(held_before=frozenset(), holding_now=frozenset()))
    now = ACQUIRED + timedelta(minutes=1)
    decision = decide_lock(lock("pod-0", when=LONG_AGO), writer, alive, now, LIMIT)
    assert decision.break_it and "older than any run" in decision.reason
    # today's rule alone (no age known) keeps it: the host proves nothing by the Leases
    assert not decide_lock(lock("pod-0", when=LONG_AGO), writer, alive).break_it


def test_a_stale_lock_younger_than_a_run_can_be_is_kept() -> None:
    writer = Writer("pod-b", 1, Lease())
    young = ACQUIRED - timedelta(minutes=20)  # before the Lease, but a run may still be on
    decision = decide_lock(lock("laptop", when=young), writer, alive, ACQUIRED, LIMIT)
    assert not decision.break_it


def test_an_old_lock_taken_after_this_holders_token_began_is_kept() -> None:
    writer = Writer("pod-b", 1, Lease())
    taken = ACQUIRED + timedelta(minutes=1)  # while this replica held the Lease: not a dead
    now = taken + timedelta(hours=3)  # holder's; someone else's, reported
    assert not decide_lock(lock("laptop", when=taken), writer, alive, now, LIMIT).break_it


def test_no_age_rule_without_the_lease_or_a_timestamp() -> None:
    now = ACQUIRED + timedelta(hours=5)
    assert not decide_lock(
        lock("x", when=LONG_AGO), Writer("b", 1, Lease(holding=False)), alive, now, LIMIT
    ).break_it
    assert not decide_lock(
        lock("x", when=None), Writer("b", 1, Lease()), alive, now, LIMIT
    ).break_it
    assert not decide_lock(
        lock("x", when=LONG_AGO), Writer("b", 1, None), alive, now, LIMIT
    ).break_it
