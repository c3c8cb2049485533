"""Fencing the shards' work (shards.py, shard_work.py): a round's renewals go out at once; a
lost shard's runs are killed on threads of their own, every shard at once; a shard given up is
released only once its operation is over, and no CLI starts in between; shutdown releases
within its grace; the engine's fence refuses a CLI launch once the shard went. The tests
assert what ran at once and in what order; how long it takes is bench/shard_rounds.py's."""

import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest
from spotpool_operator.replicas.lease import HELD_FOR, KILL_AT
from spotpool_operator.replicas.sharding import shard_of
from spotpool_operator.replicas.shards import NotServed, ShardLeases

from spotpool.engine.fencing.processes import RUN_NICENESS, FencedCommand, fenced
from tests.operator.lease_fakes import GATHER_TIMEOUT, FakeClock, FakeLeases, Stalling

pytestmark = pytest.mark.unit

SHARDS, D = 16, 30.0
WIDTH = 8  # a round's requests go out on this many threads (shards.py)


def _replica(api: object, host: str, clock: FakeClock, shards: int = SHARDS) -> ShardLeases:
    return ShardLeases(api, "ops", "op", shards, D, hostname=host, monotonic=clock)


def _uid_in(shard: int, shards: int = SHARDS) -> str:
    return next(f"uid-{n}" for n in range(1000) if shard_of(f"uid-{n}", shards) == shard)


def test_a_round_renews_every_shard_at_once_with_a_slow_api_server() -> None:
    server, clock = FakeLeases(), FakeClock()
    replica = _replica(server, "pod-a", clock)
    replica.step()
    replica.step()
    assert all(replica.holds(s) for s in range(SHARDS))
    server.gather(WIDTH)  # the server answers once WIDTH requests are in flight together
    calls = server.calls
    replica.step()
    assert server.calls - calls == SHARDS + 2  # 16 renewals, the membership, the listing
    assert server.peak == WIDTH  # in parallel, as many as the round's threads
    assert all(replica.holds(s) for s in range(SHARDS))


def test_every_lost_shards_runs_are_killed_at_once_on_threads_of_their_own() -> None:
    server, clock = FakeLeases(), FakeClock()
    api = Stalling(server)
    replica = _replica(api, "pod-a", clock)
    replica.step()
    replica.step()
    # Each kill waits for every other shard's to be under way: kills made one after another
    # would break the barrier (its timeout is a deadlock breaker, not a time bound).
    together = threading.Barrier(SHARDS, timeout=GATHER_TIMEOUT)
    killed: dict[int, str] = {}
    all_killed = threading.Event()

    def kill(shard: int, uids: list[str]) -> None:
        together.wait()
        killed[shard] = threading.current_thread().name
        if len(killed) == SHARDS:
            all_killed.set()

    replica.on_stop.append(kill)
    done = threading.Event()
    watcher = threading.Thread(target=replica._watch, args=(done,))
    watcher.start()
    try:
        api.down = True  # renewals fail from now on
        with pytest.raises(TimeoutError):
            replica.step()
        clock.advance(D * KILL_AT + 0.1)  # the Lease slipped, and no renewal took it back
        assert all_killed.wait(GATHER_TIMEOUT), f"killed {sorted(killed)} of {SHARDS} shards"
    finally:
        done.set()
        watcher.join()
    assert sorted(killed) == list(range(SHARDS))
    assert set(killed.values()) == {f"shard-{s}-stop" for s in range(SHARDS)}
    assert not any(replica.holds(s) for s in range(SHARDS))


def test_a_slipped_lease_renewed_late_keeps_its_runs_and_its_fence_refuses_meanwhile(
    tmp_path: Path,
) -> None:
    """A Lease that slips (renewals failing on a busy machine) and is taken back with no other
    holder in between (the same holder, no transition): the run under way is not killed and
    goes on under its fence, which refused every launch while the Lease was not held. Past the
    Lease's kill_at the runs are killed (and a re-take is a new tenure: the old fence stays
    refused)."""
    server, clock = FakeLeases(), FakeClock()
    api = Stalling(server)
    replica = _replica(api, "pod-a", clock, shards=2)
    replica.step()
    replica.step()
    kills: list[int] = []
    replica.on_stop.append(lambda shard, uids: kills.append(shard))
    command = _fake_pulumi(tmp_path)
    uid = _uid_in(0, 2)
    lease = replica.leases[0]
    transitions = server.items[lease.name].spec.lease_transitions
    with replica.operation(uid) as fence, fenced(lambda: replica.check(fence)):
        api.down = True  # renewals fail: the Lease slips
        replica.renew_due(replica._renewers, every=True)
        clock.advance(D * HELD_FOR + 0.1)
        replica.watch_once()
        assert not replica.serves(uid) and replica._slipped == {0, 1}
        with pytest.raises(NotServed):  # no launch while it is not held
            command.run(["up"], str(tmp_path), {})
        with pytest.raises(NotServed), replica.operation(uid):
            pass  # no new operation either
        assert list(tmp_path.glob("launched-*")) == []

        api.down = False  # the renewal thread's next try lands before kill_at
        replica.renew_due(replica._renewers)
        replica.watch_once()
        assert kills == [] and replica._slipped == set()  # the run under way goes on
        assert replica.serves(uid) and replica.epoch(uid) == 1
        assert server.items[lease.name].spec.holder_identity == replica.identity
        assert server.items[lease.name].spec.lease_transitions == transitions
        command.run(["up"], str(tmp_path), {})  # its fence holds again: launched
        assert len(list(tmp_path.glob("launched-*"))) == 1
        assert replica.metrics.transitions.labels("0", "kept")._value.get() == 1

        api.down = True  # a second slip, and no renewal before kill_at: killed
        clock.advance(D * KILL_AT + 0.1)
        replica.watch_once()
        deadline = time.monotonic() + GATHER_TIMEOUT
        while sorted(set(kills)) != [0, 1] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(set(kills)) == [0, 1]
    api.down = False  # the operation ended (killed): its shard drained
    deadline = time.monotonic() + GATHER_TIMEOUT
    while not replica.serves(uid) and time.monotonic() < deadline:
        replica.step()  # the Lease still names it: taken again, a new tenure
        time.sleep(0.01)
    assert replica.serves(uid) and replica.epoch(uid) == 2
    with pytest.raises(NotServed):  # the killed tenure's fence stays refused
        replica.check(fence)
    assert len(list(tmp_path.glob("launched-*"))) == 1


def test_a_shard_given_up_stays_held_until_its_operation_ends_and_launches_nothing_meanwhile(
    tmp_path: Path,
) -> None:
    server, clock = FakeLeases(), FakeClock()
    a = _replica(server, "pod-a", clock, shards=2)
    a.step()
    a.step()
    assert a.holds(0) and a.holds(1)
    kills: list[int] = []
    a.on_stop.append(lambda shard, uids: kills.append(shard))
    command = _fake_pulumi(tmp_path)
    b = _replica(server, "pod-b", clock, shards=2)
    in_op, finish = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def operation(uid: str) -> None:
        with a.operation(uid) as fence, fenced(lambda: a.check(fence)):
            in_op.set()
            finish.wait(10)
            try:
                command.run(["up"], str(tmp_path), {})
                outcome["launched"] = True
            except NotServed as error:
                outcome["refused"] = str(error)

    running = [threading.Thread(target=operation, args=(_uid_in(s, 2),)) for s in (0, 1)]
    for thread in running:
        thread.start()
    in_op.wait(5)
    b.step()  # b joins: one shard is to move to it
    a.step()
    moving = next(s for s in (0, 1) if not a.holds(s))
    for _ in range(4):  # a whole duration and more: a keeps renewing the moving shard's Lease
        clock.advance(D / 3)
        b.step()
        a.step()
        assert not b.holds(moving)
        assert server.items[a.leases[moving].name].spec.holder_identity == a.identity
    assert moving in kills  # its runs are being killed meanwhile
    finish.set()
    for thread in running:
        thread.join()
    assert outcome == {"launched": True, "refused": outcome["refused"]}  # only the kept shard
    assert f"shard {moving}" in str(outcome["refused"])
    assert not (tmp_path / f"launched-{moving}").exists()
    deadline = time.monotonic() + 5
    while not b.holds(moving) and time.monotonic() < deadline:
        a.step()
        b.step()
        time.sleep(0.05)
    assert b.holds(moving) and not a.holds(moving)


def test_release_all_ends_within_its_grace_and_keeps_the_lease_of_a_live_operation() -> None:
    server, clock = FakeLeases(), FakeClock()
    a = _replica(server, "pod-a", clock, shards=2)
    a.step()
    a.step()
    stuck, finish = threading.Event(), threading.Event()

    def operation() -> None:
        with a.operation(_uid_in(0, 2)):
            stuck.set()
            finish.wait(10)

    thread = threading.Thread(target=operation)
    thread.start()
    stuck.wait(5)
    a.release_all(grace=1.0)
    # It returned with the operation still under way (which ends only when told to): it kept
    # to its grace instead of waiting for the operation.
    assert thread.is_alive()
    finish.set()
    thread.join()
    assert server.items[a.leases[0].name].spec.holder_identity == a.identity  # it expires
    assert server.items[a.leases[1].name].spec.holder_identity == ""  # given back
    assert a.member.name not in server.items


def _fake_pulumi(tmp_path: Path) -> FencedCommand:
    """A `pulumi` that records each launch (a file), as the fence sees a real one."""
    root = tmp_path / "pulumi"
    (root / "bin").mkdir(parents=True)
    script = root / "bin" / "pulumi"
    script.write_text(f'#!/bin/sh\ntouch "{tmp_path}/launched-$$"\n')
    script.chmod(0o755)
    return FencedCommand(root=str(root))


def test_a_renewal_waits_for_its_answer_until_the_runs_would_be_killed() -> None:
    """A renewal counts from when it was sent: on a slow API server it waits for its answer
    until kill_at rather than giving up after a short timeout (a renewal that timed out often
    lands all the same, and the next one then conflicts)."""

    class Timed(FakeLeases):
        timeouts: ClassVar[list[float]] = []

        def replace_namespaced_lease(self, name: str, namespace: str, body: object,
                                     **kwargs: float) -> object:  # fmt: skip
            self.timeouts.append(kwargs["_request_timeout"])
            return super().replace_namespaced_lease(name, namespace, body)

    server, clock = Timed(), FakeClock()
    replica = _replica(server, "pod-a", clock, shards=1)
    replica.step()
    replica.step()
    lease = replica.leases[0]
    clock.advance(D / 6)  # due
    server.timeouts.clear()
    replica.renew_due(replica._renewers)
    assert server.timeouts == [pytest.approx(D * (KILL_AT - 1 / 6))]
    assert lease.timeout < server.timeouts[0]


def test_a_pulumi_run_starts_at_a_lower_priority_than_the_replica(tmp_path: Path) -> None:
    """The CLI (and its plugins) run at RUN_NICENESS: a replica at its CPU limit renews its
    Leases before it runs Pulumi."""
    root = tmp_path / "pulumi"
    (root / "bin").mkdir(parents=True)
    script = root / "bin" / "pulumi"
    script.write_text(f'#!/bin/sh\nnice > "{tmp_path}/niceness"\n')
    script.chmod(0o755)
    command = FencedCommand(root=str(root))
    launched = threading.Thread(target=command.run, args=(["up"], str(tmp_path), {}))
    launched.start()
    launched.join()
    assert int((tmp_path / "niceness").read_text()) == RUN_NICENESS
