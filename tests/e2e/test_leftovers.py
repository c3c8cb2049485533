"""Nothing of the install is left behind for good (issue 33, paths 8 and 9), as a cluster meets
it: a late instance of a deleted pool (what a stalled replica's fast-path launch lands as) is
swept once older than the grace — with an Event and a metric — while another install's and a
Retain deletion's instances run on; a stale Pulumi lock whose host is on no Lease's holder list
is broken once older than any run can be, with no `pulumi cancel`."""

import json
import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotpool.localworld.kube import Kube
from tests.e2e._support.operator_runs import INSTALL_LEASE, cluster_uid, launch_tagged
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
GRACE = 20.0  # --orphan-grace here: the sweep looks every 6.7 s
INSTALL = f"default.{INSTALL_LEASE}"


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    env = {"SPOTPOOL_ORPHAN_GRACE": f"{GRACE:.0f}s", "SPOTPOOL_OPERATION_TIMEOUT": "60s"}
    with operator_world(kube, tmp_path_factory.mktemp("leftovers"), env=env) as world:
        yield world


def _launch(world: OperatorWorld, ns: str, name: str, uid: str, install: str | None) -> str:
    """What a late RunInstances for the pool lands as: an instance tagged for its slot 0."""
    return launch_tagged(world, ns, name, uid, 0, install)[1]


def _passes(world: OperatorWorld) -> int:
    found = re.findall(r"stray sweep (\d+):", world.log.read_text(errors="replace"))
    return int(found[-1]) if found else 0


def _swept_total(world: OperatorWorld) -> float:
    match = re.search(r"^spotpool_orphans_swept_total (\S+)$", world.metrics(), re.M)
    return float(match.group(1)) if match else 0.0


def _delete(world: OperatorWorld, ns: str, name: str) -> None:
    world.kube.ok("-n", ns, "delete", "spotpool", name, "--wait=false")
    world.wait_until(lambda: world.get(ns, name) is None, f"{name} deleted", timeout=240)


def test_a_deleted_pools_late_instance_is_swept_and_another_installs_is_not(
    world: OperatorWorld,
) -> None:
    ns = world.namespace()
    world.apply(ns, pool_manifest("late"))
    pool = world.wait_ready(ns, "late", 1)
    uid = pool["metadata"]["uid"]
    _delete(world, ns, "late")
    swept_before = _swept_total(world)
    # A replica that stalled before its RunInstances sends it now: the pool is gone.
    stray = launch_tagged(world, ns, "late", uid, 0, INSTALL, cluster_uid(world.kube))[1]
    theirs = _launch(world, ns, "late", uid, install="another-install")
    untagged = _launch(world, ns, "late", uid, install=None)

    world.wait_until(lambda: stray not in world.cloud(uid), "the stray swept", timeout=120)
    assert set(world.cloud(uid)) == {theirs, untagged}  # never another install's
    world.wait_until(lambda: _swept_total(world) >= swept_before + 1, "counted", timeout=30)

    def swept_event() -> list[str]:
        return [m for _, r, m in world.events(ns, "late") if r == "OrphanSwept"]

    (message,) = world.wait_until(swept_event, "the OrphanSwept Event", timeout=30)
    assert stray in message and uid in message


def test_retained_instances_outlive_the_grace(world: OperatorWorld) -> None:
    ns = world.namespace()
    world.apply(ns, pool_manifest("kept", deletionPolicy="Retain"))
    pool = world.wait_ready(ns, "kept", 1)
    uid, kept = pool["metadata"]["uid"], pool["status"]["instances"][0]["instanceId"]
    _delete(world, ns, "kept")
    # Past the grace from its creation (the emulator's clock, this host's), an instance the
    # sweep would terminate were it not kept: two sweeps from then.
    (created,) = [i["CreatedAt"] for i in world.emulator.all_instances() if i["InstanceId"] == kept]
    world.wait_until(lambda: time.time() > created + GRACE, "the grace over", timeout=GRACE + 5)
    since = _passes(world)
    world.wait_until(lambda: _passes(world) >= since + 2, "two sweeps past the grace", 60)
    assert kept in world.cloud(uid)
    text = world.log.read_text(errors="replace")
    assert f"left instance {kept} of deleted pool {uid}: kept by its pool's deletion" in text


def _lock(world: OperatorWorld, stack: str, host: str, when: datetime) -> Any:
    locks = world.directory / "backend" / ".pulumi" / "locks" / "organization" / "spotpool"
    path = locks / stack / f"{uuid.uuid4()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    path.write_text(json.dumps({"pid": 4242, "username": "root", "hostname": host,
                                "timestamp": stamp}))  # fmt: skip
    return path


def test_a_stale_lock_of_a_host_on_no_holder_list_is_broken(world: OperatorWorld) -> None:
    ns = world.namespace()
    world.apply(ns, pool_manifest("stale", replicas=1))
    world.wait_ready(ns, "stale", 1)
    # A replica long gone, fallen off every Lease's 32 recorded holders, left its lock.
    lock = _lock(
        world, f"{ns}.stale", "spotpool-operator-7f9c-old", datetime.now(UTC) - timedelta(hours=2)
    )
    world.kube.ok("-n", ns, "patch", "spotpool", "stale", "--type=merge", "-p",
                  '{"spec":{"replicas":2}}')  # fmt: skip

    def outcome() -> str | None:
        status = world.status(ns, "stale")
        if status.get("readyReplicas") == 2:
            return "scaled"
        return "locked" if "StackLocked" in world.reasons(ns, "stale") else None

    assert world.wait_until(outcome, "the scale-up, or StackLocked", timeout=240) == "scaled"
    assert not lock.exists()
    assert "older than any run can be" in world.log.read_text(errors="replace")
