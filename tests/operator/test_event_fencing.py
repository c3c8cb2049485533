"""Events fenced like status (issue 33, path 7): a replica whose shard went while it worked
posts neither `Converged` nor `Reclaimed` for the pool; the new holder reports."""

import threading
from pathlib import Path
from typing import Any

import pytest
from spotpool_operator.basics.failures import PoolProblem
from spotpool_operator.replicas.sharding import shard_of
from spotpool_operator.replicas.shards import ShardLeases
from spotpool_operator.reporting.events import FencedEvents

from tests.operator.fakes import RecordedEvents, World, make_world, pool_body, ref, run

pytestmark = pytest.mark.unit

SHARDS = 4
UID = next(f"uid-{n}" for n in range(1000) if shard_of(f"uid-{n}", SHARDS) == 2)


def _served(tmp_path: Path) -> tuple[World, ShardLeases]:
    world = make_world(tmp_path)
    shards = ShardLeases(api=None, namespace="ops", base="op", shards=SHARDS, hostname="pod-a")
    world.reconciler.shards = shards
    shards.leases[2].assume()
    shards._note_acquired()
    return world, shards


def _lose_shard_during(world: World, shards: ShardLeases, work: Any) -> None:
    """Run `work` (a coroutine) while the engine's call waits at the gate; the shard's Lease
    slips away in the middle of it, then the call returns."""
    world.cloud.gate = threading.Event()
    failure: list[BaseException] = []

    def go() -> None:
        try:
            run(work)
        except BaseException as error:  # the caller looks at what was posted
            failure.append(error)

    worker = threading.Thread(target=go)
    worker.start()
    assert world.cloud.entered.acquire(timeout=10)
    shards.leases[2].drop()  # not renewed in time: another replica may hold it now
    world.cloud.gate.set()
    worker.join(10)
    assert not worker.is_alive()


def test_no_converged_event_from_a_replica_whose_shard_went_mid_up(tmp_path: Path) -> None:
    world, shards = _served(tmp_path)
    _lose_shard_during(world, shards, world.reconciler.converge(ref(pool_body("p", uid=UID))))
    assert ("up", "team-a.p") in world.cloud.calls  # the run was on when the shard went
    assert "Converged" not in world.events.reasons()


def _reclaim_seen(tmp_path: Path, shard_goes: bool) -> list[str]:
    """The events posted when the fleet probe saw slot 0 go and the pool's turn came, with the
    shard's Lease held throughout or slipped away before the turn."""
    tmp_path.mkdir()
    world, shards = _served(tmp_path)
    body = pool_body("p", uid=UID)
    run(world.reconciler.converge(ref(body)))
    pool = world.reconciler.pools[UID]
    pool.gone_slots = {0}  # the fleet probe saw slot 0 go ...
    if shard_goes:
        shards.leases[2].drop()  # ... and the shard slipped away before the pool's turn came
        with pytest.raises(PoolProblem, match="served by another replica"):  # its engine call too
            run(world.reconciler.replace_gone(ref(body)))
    else:
        run(world.reconciler.replace_gone(ref(body)))
    return world.events.reasons()


def test_no_reclaimed_event_from_a_replica_whose_shard_went(tmp_path: Path) -> None:
    # The control: the same steps with the shard held post it (the check below can fail).
    assert "Reclaimed" in _reclaim_seen(tmp_path / "held", shard_goes=False)
    assert "Reclaimed" not in _reclaim_seen(tmp_path / "lost", shard_goes=True)


def test_fenced_events_check_the_shard_at_the_post() -> None:
    inner, serving = RecordedEvents(), {"mine"}
    events = FencedEvents(inner, serving.__contains__)
    meta = {"namespace": "team-a", "name": "p"}
    events.post({"metadata": {**meta, "uid": "mine"}}, "Normal", "Converged", "ok")
    serving.clear()
    events.post({"metadata": {**meta, "uid": "mine"}}, "Warning", "Reclaimed", "late")
    events.post({"metadata": meta}, "Normal", "NoUid", "an object of no pool passes")
    assert inner.reasons() == ["Converged", "NoUid"]
    assert events.dropped == 1
