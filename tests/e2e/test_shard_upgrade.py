"""The upgrade from a single replica to shards, with a stack lock left behind: an operator of
before shards (`SPOTPOOL_SHARDS=1`: it holds the single Lease) is killed mid-`up` under one
hostname; one with the default 16 shards starts under another. The lock's owner never held the
pool's shard Lease, only the single Lease: the new replica proves it gone from the install's
Leases (it holds none of them and has no live membership) and breaks its lock — no manual
step, no duplicate or leaked instance."""

import json
import time
import uuid
from collections.abc import Iterator

import pytest
from spotpool_operator.replicas.sharding import shard_lease_name, shard_of

from spotpool.localworld.kube import Kube
from tests.e2e._support.operator_runs import kill_mid_up
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld

pytestmark = pytest.mark.e2e
LEASE = f"spotpool-up-{uuid.uuid4().hex[:6]}"  # this module's install alone


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    with operator_world(
        kube, tmp_path_factory.mktemp("upgrade"), namespace_prefix="up-",
        hostname=f"spotpool-operator-old-{uuid.uuid4().hex[:4]}",
        env={"SPOTPOOL_SHARDS": "1", "SPOTPOOL_LEASE_NAME": LEASE},
    ) as world:  # fmt: skip
        yield world


def _lease(world: OperatorWorld, name: str) -> dict[str, object]:
    lease: dict[str, object] = json.loads(
        world.kube.ok("-n", "default", "get", "lease", name, "-o", "json")
    )
    return lease


def _holders(lease: dict[str, object]) -> list[str]:
    annotations = lease["metadata"].get("annotations") or {}  # type: ignore[attr-defined]
    return list(json.loads(annotations.get("spotpool.devops.jokerbai.com/holders", "[]")))


def test_a_lock_left_by_a_replica_of_before_shards_is_broken_by_the_sharded_one(
    world: OperatorWorld,
) -> None:
    killed = kill_mid_up(world)  # mid-up, whole process tree at once
    ns, uid, old_host = killed.namespace, killed.uid, killed.old_host
    assert old_host == world.hostname
    assert _holders(_lease(world, LEASE)) == [old_host]  # it held the single Lease

    world.hostname = f"spotpool-operator-new-{uuid.uuid4().hex[:4]}"
    world.env = {"SPOTPOOL_LEASE_NAME": LEASE, "SPOTPOOL_SHARDS": "16"}  # the chart's default
    started = time.monotonic()
    world.start()
    pool = world.wait_ready(ns, "moved", 3, timeout=300)
    took = time.monotonic() - started

    ids = sorted(str(i["instanceId"]) for i in pool["status"].get("instances") or [])
    assert sorted(world.cloud(uid)) == ids and len(set(ids)) == 3  # no leak, no duplicate
    assert not killed.locks()

    def recovered() -> list[str]:  # the Event is posted beside the run: it may trail Ready
        said = [m for _, r, m in world.events(ns, "moved") if r == "Recovered"]
        return [m for m in said if f"@{old_host}" in m and "holds none of them now" in m]

    world.wait_until(recovered, "the Recovered Event naming the old holder", 30)
    shard = _lease(world, shard_lease_name(LEASE, 16, shard_of(uid, 16)))
    assert old_host not in _holders(shard)  # its own shard's history could not prove it
    assert str(shard["spec"]["holderIdentity"]).startswith(world.hostname)  # type: ignore[index]
    print(f"converged {took:.1f} s after the sharded replica started")
