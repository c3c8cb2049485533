"""Deleting a pool leaks nothing, as it happens in a cluster: an instance tagged for the pool by
this install that its stack does not hold (a killed run's create, too young for the orphan
sweep to terminate) keeps the finalizer until it is gone; the Spotpool is removed only then,
with no instance of the pool left running."""

from collections.abc import Iterator

import pytest
from tencentcloud.cvm.v20170312 import models

from spotpool.localworld.kube import Kube
from tests.e2e._support.operator_runs import tagged_instance
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    with operator_world(kube, tmp_path_factory.mktemp("deletion")) as world:
        yield world


def test_deletion_waits_for_a_young_tagged_instance_and_leaves_none(world: OperatorWorld) -> None:
    ns = world.namespace()
    world.apply(ns, pool_manifest("leaky", replicas=1, maximum=5))
    pool = world.wait_ready(ns, "leaky", 1)
    uid = pool["metadata"]["uid"]
    # What a run killed mid-create leaves: an instance of this install for slot 1, not in state.
    client, young = tagged_instance(world, ns, "leaky", uid, slot=1)

    world.kube.ok("-n", ns, "delete", "spotpool", "leaky", "--wait=false")

    def waiting() -> bool:
        reasons = world.reasons(ns, "leaky")
        return "WaitingForInstances" in reasons

    world.wait_until(waiting, "the finalizer waiting for the young instance", timeout=180)
    assert world.get(ns, "leaky") is not None  # the finalizer holds the Spotpool
    assert young in world.cloud(uid)
    message = next(m for _, r, m in world.events(ns, "leaky") if r == "WaitingForInstances")
    assert young in message, message

    # The young instance goes (its writer's cleanup, or the sweep once it is old enough).
    terminate = models.TerminateInstancesRequest()
    terminate.InstanceIds = [young]
    client.TerminateInstances(terminate)
    world.wait_until(lambda: world.get(ns, "leaky") is None, "the Spotpool removed", 240)
    assert world.cloud(uid) == {}  # nothing of the pool left running
