"""The reconciler with shards: it runs the engine and writes status only for pools of the shards
this replica holds, and forgets a pool the moment its shard goes; and its engine calls' ranks."""

import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest
from spotpool_operator.basics.failures import PoolProblem
from spotpool_operator.convergence.slots import Priority
from spotpool_operator.replicas.sharding import shard_of
from spotpool_operator.replicas.shards import ShardLeases

from spotpool.api.stackconfig import PoolIdentity
from spotpool.engine.fencing.ownership import LockOwner, Writer, decide_lock
from tests.operator.fakes import World, make_world, pool_body, ref, run

pytestmark = pytest.mark.unit

SHARDS = 4


def _sharded(tmp_path: Path) -> tuple[World, ShardLeases]:
    world = make_world(tmp_path)
    shards = ShardLeases(api=None, namespace="ops", base="op", shards=SHARDS, hostname="pod-a")
    world.reconciler.shards = shards
    return world, shards


def _hold(shards: ShardLeases, shard: int) -> None:
    """As a won Lease leaves it (step() against the API server: tests/e2e/test_shards.py)."""
    shards.leases[shard].assume()
    shards._note_acquired()


def _uid_in(shard: int) -> str:
    return next(f"uid-{n}" for n in range(1000) if shard_of(f"uid-{n}", SHARDS) == shard)


def test_a_pool_of_another_replicas_shard_gets_no_engine_run_and_no_status(
    tmp_path: Path,
) -> None:
    world, _ = _sharded(tmp_path)
    body = pool_body("theirs", uid=_uid_in(1))
    with pytest.raises(PoolProblem, match="another replica") as raised:
        run(world.reconciler.converge(ref(body)))
    assert raised.value.reason == "NotServed"
    assert world.cloud.calls == [] and world.cluster.statuses == {}
    assert world.events.posted == []  # the serving replica reports, not this one


def test_a_pool_is_served_while_its_shard_is_held_and_forgotten_when_it_goes(
    tmp_path: Path,
) -> None:
    world, shards = _sharded(tmp_path)
    _hold(shards, 2)
    assert shards.epoch(_uid_in(2)) == 1
    body = pool_body("mine", uid=_uid_in(2))
    run(world.reconciler.converge(ref(body)))
    assert ("up", "team-a.mine") in world.cloud.calls
    assert world.cluster.last("team-a/mine")["phase"] == "Ready"
    shards.know(body["metadata"]["uid"], "team-a.mine")

    stopped: list[tuple[int, list[str]]] = []
    shards.on_stop.append(lambda shard, uids: stopped.append((shard, uids)))
    assert shards.stop(2, "lost")  # its Lease slipped away
    assert stopped == [(2, [body["metadata"]["uid"]])]
    assert not shards.serves(body["metadata"]["uid"])
    world.reconciler.drop([body["metadata"]["uid"]])
    assert body["metadata"]["uid"] not in world.reconciler.pools
    writes = len(world.cluster.statuses["team-a/mine"])
    with pytest.raises(PoolProblem):
        run(world.reconciler.converge(ref(pool_body("mine", uid=_uid_in(2), replicas=3))))
    assert len(world.cluster.statuses["team-a/mine"]) == writes  # nothing written after it went


def test_a_lock_is_broken_only_for_an_earlier_holder_of_the_pools_own_shard() -> None:
    shards = ShardLeases(api=None, namespace="ops", base="op", shards=SHARDS, hostname="pod-a")
    acquired = datetime(2026, 11, 24, 15, 0, tzinfo=UTC)
    for shard, earlier in ((2, {"pod-b"}), (3, {"pod-c"})):
        lease = shards.leases[shard]
        lease.assume(frozenset(earlier), acquired)
    shards._note_acquired()
    writer = Writer("pod-a", 4242, shards.view(_uid_in(2)))

    def lock(host: str) -> LockOwner:
        taken = "2026-11-24T14:59:00.123456789Z"  # before pod-a acquired the shard
        return LockOwner.parse("k", {"hostname": host, "pid": 7, "timestamp": taken})

    assert decide_lock(lock("pod-b"), writer, lambda pid: True).break_it  # shard 2's earlier
    assert not decide_lock(lock("pod-c"), writer, lambda pid: True).break_it  # shard 3's only
    shards.stop(2, "lost")
    assert not decide_lock(lock("pod-b"), writer, lambda pid: True).break_it  # not held now


def test_engine_calls_are_ranked_replace_update_refresh_create(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    reconciler = world.reconciler
    new = reconciler.pool(ref(pool_body("new")))
    assert reconciler._priority("up", "uid-new") == Priority.CREATE
    run(reconciler.converge(ref(pool_body("old"))))
    assert reconciler._priority("up", "uid-old") == Priority.UPDATE  # a spec change
    assert reconciler._priority("refresh", "uid-old") == Priority.REFRESH
    reconciler.pool(ref(pool_body("old"))).replace_pending = True
    assert reconciler._priority("up", "uid-old") == Priority.REPLACE
    new.gone_slots = {0}
    assert reconciler._priority("up", "uid-new") == Priority.REPLACE


def test_a_closure_over_a_pools_engine_is_fenced_like_its_methods(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The rolled-out up (converge.py) is a closure, not an engine method: named with
    `engine=`, it is refused for another replica's pool and logged as the pool's run for ours."""
    world, shards = _sharded(tmp_path)
    _hold(shards, 2)
    ran: list[str] = []

    def engine_for(uid: str) -> object:
        return type("Engine", (), {"pool": PoolIdentity(namespace="team-a", name="p", uid=uid),
                                   "name": f"stack-of-{uid}"})()  # fmt: skip

    theirs, ours = engine_for(_uid_in(1)), engine_for(_uid_in(2))
    with pytest.raises(PoolProblem, match="another replica"):
        run(world.reconciler._engine_call("up", lambda: ran.append("theirs"), engine=theirs))
    with caplog.at_level(logging.INFO, logger="spotpool_operator.runs"):
        run(world.reconciler._engine_call("up", lambda: ran.append("ours"), engine=ours))
    assert ran == ["ours"]
    assert f"<lambda> of stack-of-{_uid_in(2)} begins" in caplog.text
