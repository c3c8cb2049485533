"""Deleting a pool leaks nothing, for real (the operator's deletion over the real engine and
the emulator): the finalizer's work ends only once every instance tagged with the pool's uid
and install is gone, young ones included; Retain keeps, and names, surge instances too."""

import time
from pathlib import Path

import pytest
from spotpool_operator.basics.failures import PoolProblem
from spotpool_operator.basics.settings import OperatorSettings
from spotpool_operator.process.reconciler import Reconciler
from spotpool_operator.reporting.metrics import Metrics

from spotpool.api.stackconfig import TAG_INSTALL, PoolIdentity
from spotpool.engine.stacks.stack import PoolStack
from spotpool.engine.tencent import cloud
from spotpool.engine.tencent.credentials import Credentials
from tests.emulator.harness import SECRET_ID, SECRET_KEY, run_spot, wait_until
from tests.engine.conftest import REGION, EngineWorld
from tests.operator.fakes import FakeCluster, RecordedEvents, pool_body, ref, run

pytestmark = pytest.mark.integration
MIN_AGE = 12.0  # seconds an orphan may be another writer's create in flight


def _reconciler(world: EngineWorld, tmp_path: Path) -> tuple[Reconciler, RecordedEvents]:
    engine = world.settings.model_copy(update={"orphan_min_age": MIN_AGE})

    def factory(
        pool: PoolIdentity, credentials: Credentials, region: str, progress: object
    ) -> PoolStack:
        return PoolStack(pool, engine, credentials, region)

    cluster, events = FakeCluster(), RecordedEvents()
    cluster.secrets[("team-a", "tencentcloud")] = {
        "secretId": SECRET_ID.encode(),
        "secretKey": SECRET_KEY.encode(),
    }
    settings = OperatorSettings(engine=engine, metrics_port=0, liveness_port=0)
    return Reconciler(settings, cluster, events, Metrics(), factory), events


def _stacks(world: EngineWorld, stack: PoolStack) -> str:
    return world.pulumi(stack, "stack", "ls", "--json")


def test_deleting_waits_for_a_young_tagged_instance_then_leaves_none(
    world: EngineWorld, tmp_path: Path
) -> None:
    stack = world.pool()
    config = world.config(stack, 1)
    stack.up(config)
    # Another writer's create in flight: tagged for the pool and this install, not in the state.
    client = cloud.cvm(world.credentials, REGION, world.emulator.endpoint)
    spot = {"zone": "ap-singapore-2", "instance_type": "GN7.2XLARGE32", "ImageId": "img-eb30mz89"}
    (young,) = run_spot(
        client, count=1, tags={**config.instance_tags(3), TAG_INSTALL: "default"}, **spot
    )
    born = time.monotonic()
    reconciler, events = _reconciler(world, tmp_path)
    body = ref(pool_body(uid=stack.pool.uid))

    with pytest.raises(PoolProblem) as waiting:  # the handler's error: kopf keeps the finalizer
        run(reconciler.delete(body))
    assert waiting.value.reason == "WaitingForInstances"
    assert young in waiting.value.message
    assert set(world.cloud_instances(stack)) == {young}  # the state's one is destroyed
    assert f'"{stack.name}"' in _stacks(world, stack)  # the stack is kept for the next sweep
    assert "WaitingForInstances" in events.reasons() and "Destroyed" not in events.reasons()

    time.sleep(max(0.0, MIN_AGE + 1 - (time.monotonic() - born)))
    run(reconciler.delete(body))  # the requeue: old enough now, swept, and only then done

    assert "Destroyed" in events.reasons()
    wait_until(lambda: not world.cloud_instances(stack), "no instance of the pool", timeout=60)
    assert f'"{stack.name}"' not in _stacks(world, stack)


def test_retain_keeps_and_names_the_surge_instances(world: EngineWorld, tmp_path: Path) -> None:
    stack = world.pool()
    config = world.config(stack, 1)
    (first,) = stack.up(config).instances
    (surge,) = stack.start_surge(config, [0]).surges
    reconciler, events = _reconciler(world, tmp_path)

    run(reconciler.delete(ref(pool_body(uid=stack.pool.uid, deletionPolicy="Retain"))))

    (retained,) = [m for _, r, m in events.posted if r == "Retained"]
    assert "2 instance(s) kept" in retained
    assert f"{surge.instance_id} (surge-0)" in retained
    assert f"{first.instance_id} (slot-0)" in retained
    assert set(world.cloud_instances(stack)) == {first.instance_id, surge.instance_id}
