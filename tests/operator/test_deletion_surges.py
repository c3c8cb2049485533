"""Deleting counts surge instances: a stack holding only surges is not removed without the
key pair to delete them (the fake engine; the real one is in tests/engine/test_deletion.py)."""

from pathlib import Path

import pytest
from spotpool_operator.basics.failures import PoolProblem

from tests.operator.fakes import make_world, pool_body, ref, run

pytestmark = pytest.mark.unit


def test_a_stack_holding_only_a_surge_waits_for_the_key_pair(tmp_path: Path) -> None:
    before = make_world(tmp_path)
    run(before.reconciler.converge(ref(pool_body(replicas=0, minimum=0))))
    # A new process (no keys in memory) over a stack whose one instance is a surge.
    world = make_world(tmp_path)
    world.cloud.stacks = before.cloud.stacks
    world.cloud.surges = {"team-a.gpu": {0: "ins-surge"}}
    del world.cluster.secrets[("team-a", "tencentcloud")]

    with pytest.raises(PoolProblem) as raised:
        run(world.reconciler.delete(ref(pool_body(replicas=0, minimum=0))))

    assert raised.value.reason == "SecretNotFound"
    assert "ins-surge (surge-0)" in raised.value.message
    assert "team-a.gpu" in world.cloud.stacks  # not forgotten: it still names the surge
    assert ("forget", "team-a.gpu") not in world.cloud.calls
