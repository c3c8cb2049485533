"""A replica that loses its shard and takes it again while its Lease still names it (a renewal
that came late under load: the Lease is renewed, not re-acquired) starts a new tenure: the runs
of the earlier one were killed and drained first, so a lock one of them left on this host is
broken even when its pid is alive again (reused) — not kept as a live run's (issue 33, a
mid-storm deletion stuck on StackLocked after a single replica lost and re-took its shards)."""

import os
import time
from datetime import UTC, datetime, timedelta

import pytest
from spotpool_operator.replicas.sharding import shard_of
from spotpool_operator.replicas.shards import ShardLeases

from spotpool.engine.fencing.ownership import LockOwner, Writer, decide_lock
from tests.operator.lease_fakes import FakeClock, FakeLeases, Stalling

pytestmark = pytest.mark.unit

SHARDS, D = 4, 30.0


def _uid_in(shard: int) -> str:
    return next(f"uid-{n}" for n in range(1000) if shard_of(f"uid-{n}", SHARDS) == shard)


def _lock(at: datetime) -> LockOwner:
    # A live pid of this host that is not the operator's: a reused one.
    return LockOwner("lock.json", "pod-a", os.getppid(), "root", at)


def test_a_lock_of_this_replicas_earlier_tenure_is_broken_after_it_retakes_the_shard() -> None:
    server, clock = FakeLeases(), FakeClock()
    api = Stalling(server)
    replica = ShardLeases(api, "ops", "op", SHARDS, D, hostname="pod-a", monotonic=clock)
    replica.step()
    replica.step()
    uid = _uid_in(0)
    assert replica.serves(uid)
    writer = Writer("pod-a", os.getpid(), replica.view(uid))
    taken = datetime.now(UTC)  # a run of the first tenure takes the stack's lock
    first = decide_lock(_lock(taken), writer, lambda pid: True, taken, timedelta(hours=1))
    assert not first.break_it  # its run may be alive: kept

    api.down = True  # renewals fail: the shard slips away, its runs are killed
    with pytest.raises(TimeoutError):
        replica.step()
    clock.advance(D * 2 / 3 + 0.1)
    assert not replica.serves(uid)
    replica._halt(0, "lost")  # what the watcher does the moment it sees the slip
    time.sleep(0.01)
    api.down = False
    replica.step()  # the Lease still names this replica: renewed, a new tenure
    assert replica.serves(uid)
    assert replica.epoch(uid) == 2

    now = datetime.now(UTC)
    later = decide_lock(_lock(taken), writer, lambda pid: True, now, timedelta(hours=1))
    assert later.break_it, later.reason
    kept = decide_lock(_lock(now + timedelta(seconds=1)), writer, lambda pid: True, now,
                       timedelta(hours=1))  # fmt: skip
    assert not kept.break_it  # a lock of the present tenure is a live run's
