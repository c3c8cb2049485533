"""The storm fast path as one of the shard's operations (issue 33, path 1): while a reclaimed
slot's launch runs (it may wait tens of seconds at the account's RunInstances bucket), it is
counted, so a hand-over's drain waits for it, and its thread carries the shard's fence, so the
launch itself can refuse to send once the shard is stopped."""

import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest
from spotpool_operator.basics.failures import PoolProblem
from spotpool_operator.replicas.sharding import shard_of
from spotpool_operator.replicas.shards import NotServed, ShardLeases

from spotpool.engine.fencing.processes import check_fence
from spotpool.engine.launches.fast_launch import FastLaunch
from tests.operator.fakes import FakeEngine, make_world, pool_body, ref, run

pytestmark = pytest.mark.unit

SHARDS = 4


def _uid_in(shard: int) -> str:
    return next(f"uid-{n}" for n in range(1000) if shard_of(f"uid-{n}", SHARDS) == shard)


class LaunchingEngine(FakeEngine):
    """The fake engine, with a fast path whose launch waits (as at the bucket) until let go,
    then checks its thread's fence right before it would send."""

    started: ClassVar[threading.Event] = threading.Event()
    go: ClassVar[threading.Event] = threading.Event()
    seen: ClassVar[list[str]] = []

    def launch_replacements(
        self, config: Any, slots: list[int], login_password: str | None = None
    ) -> FastLaunch:
        self.started.set()
        assert self.go.wait(timeout=30)
        try:
            check_fence()
        except NotServed:
            self.seen.append("refused")
            raise
        self.seen.append("sent")
        return FastLaunch()


def test_a_fast_launch_is_counted_drained_and_fenced_with_the_shards_operations(
    tmp_path: Path,
) -> None:
    world = make_world(tmp_path)
    shards = ShardLeases(api=None, namespace="ops", base="op", shards=SHARDS, hostname="pod-a")
    world.reconciler.shards = shards
    shards.leases[2].assume()
    shards._note_acquired()
    world.reconciler.engine_factory = lambda pool, creds, region, progress: LaunchingEngine(
        world.cloud, pool, creds
    )
    body = pool_body(replicas=2, uid=_uid_in(2))
    run(world.reconciler.converge(ref(body)))
    shards.know(_uid_in(2), "team-a.gpu")
    pool = world.reconciler.pool(ref(body))
    world.cloud.reclaim("team-a.gpu", 1)
    pool.gone_slots = {1}
    LaunchingEngine.started.clear()
    LaunchingEngine.go.clear()
    LaunchingEngine.seen.clear()
    drained = threading.Event()

    def hand_over() -> None:  # the shard moves to another replica: stop, drain
        LaunchingEngine.started.wait(timeout=30)
        counted = shards._inflight[2]
        shards._halt(2, "released")
        LaunchingEngine.go.set()
        shards._kill_until_done(2)
        drained.set()
        results.append(counted)

    results: list[int] = []
    thread = threading.Thread(target=hand_over)
    thread.start()
    with pytest.raises(PoolProblem, match="another replica"):  # and so is the Pulumi run
        run(world.reconciler.replace_gone(ref(body)))
    thread.join(timeout=30)

    assert drained.is_set()
    assert results == [1]  # the launch was one of the shard's operations while it waited
    assert LaunchingEngine.seen == ["refused"]  # its fence stopped it right before the send
