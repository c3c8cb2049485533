"""Ownership that no setting can break (issue 48, builds 1-2), as users meet it: one state
backend and one cloud account (one emulator) shared by clusters that should never have shared
them.

- Two clusters of their own identity on one backend: the second never runs an `up` on the
  first one's stack (same namespace, same pool name), says StackHeldByAnotherCluster, and
  deleting its pool leaves the first one's instances running.
- An etcd-snapshot clone of a cluster (the same kube-system uid, the same pools): both hold
  (IdentityConflict on the pool in each), and deleting the pool in the clone destroys nothing.
- A copied cluster id (`--cluster-id` of another live cluster): both hold; every instance of
  either lives three sweeps past the orphan grace.
- The same with a state backend of its own for B: the claims in the cloud account (tag pairs)
  hold both; every instance lives three sweeps past the grace.

One world for the module: cluster A (the session's) and cluster B (its own), one emulator, one
file backend, a 10 s orphan grace (a sweep every 5 s)."""

import json
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from spotpool.api.access import CONSENT_KEY
from spotpool.api.crd import CRD_PATH
from spotpool.cluster.local import down, up
from spotpool.localworld.kube import Kube
from tests.e2e._support.operator_runs import INSTALL_LEASE, cluster_uid, launch_tagged
from tests.e2e.conftest import ROOT, local_cluster, operator_world
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
GRACE = 10.0
ENV = {"SPOTPOOL_ORPHAN_GRACE": f"{GRACE:.0f}s", "SPOTPOOL_OPERATION_TIMEOUT": "90s"}
INSTALL = f"default.{INSTALL_LEASE}"


@dataclass
class World:
    a: OperatorWorld
    b: OperatorWorld
    directory: Path
    backend: str
    web: tuple[str, str, list[str]] = ("", "", [])  # A's pool: namespace, uid, instances
    extra: list[OperatorWorld] = field(default_factory=list)


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    directory = tmp_path_factory.mktemp("one-identity")
    (directory / "a").mkdir()
    with (
        operator_world(kube, directory / "a", env=ENV) as a,
        local_cluster(directory / "b-cluster") as kube_b,
    ):
        _crd(kube_b)
        (directory / "b").mkdir()
        backend = f"file://{directory / 'a' / 'backend'}"  # B's backend is A's: by mistake
        b = OperatorWorld(kube_b, a.emulator, directory / "b", env=ENV, backend_url=backend)
        shared = World(a, b, directory, backend)
        try:
            b.start()
            yield shared
        finally:
            for other in [b, *shared.extra]:
                other.stop()
            if (directory / "b2-cluster" / "cluster.json").exists():
                down(directory / "b2-cluster")


def _crd(kube: Kube) -> None:
    kube.ok("apply", "-f", str(ROOT / CRD_PATH))
    kube.ok("wait", "--for=condition=Established", "crd/spotpools.devops.jokerbai.com")


def _same_namespace(world: OperatorWorld, ns: str) -> None:
    """The namespace and Secret `ns` of another cluster, made in this one (the same manifests)."""
    world.kube.ok("create", "namespace", ns)
    world.kube.ok("-n", ns, "create", "secret", "generic", "tencentcloud",
                  f"--from-literal=secretId={world.emulator.secret_id}",
                  f"--from-literal=secretKey={world.emulator.secret_key}")  # fmt: skip
    world.kube.ok("-n", ns, "label", "secret", "tencentcloud", f"{CONSENT_KEY}=true")
    world.namespaces.append(ns)


def _tags(world: OperatorWorld, instance_id: str) -> dict[str, str]:
    (item,) = [i for i in world.emulator.all_instances() if i["InstanceId"] == instance_id]
    return {t["Key"]: t["Value"] for t in item.get("Tags") or []}


def _states(world: OperatorWorld, ids: list[str]) -> dict[str, str]:
    found = {i["InstanceId"]: i for i in world.emulator.all_instances()}
    return {i: "GONE" if found[i].get("Gone") else found[i]["InstanceState"] for i in ids}


def _condition(world: OperatorWorld, ns: str, name: str, reason: str) -> dict[str, Any] | None:
    pool = world.get(ns, name) or {}
    for condition in (pool.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Degraded" and condition.get("reason") == reason:
            return dict(condition)
    return None


def _event(world: OperatorWorld, ns: str, name: str, reason: str) -> list[str]:
    return [m for _, r, m in world.events(ns, name) if r == reason]


def _passes(world: OperatorWorld) -> int:
    found = re.findall(r"stray sweep (\d+):", world.log.read_text(errors="replace"))
    return int(found[-1]) if found else 0


def _more_passes(count: int, *worlds: OperatorWorld) -> None:
    since = [_passes(w) for w in worlds]
    for world, start in zip(worlds, since, strict=True):

        def done(w: OperatorWorld = world, s: int = start) -> bool:
            return _passes(w) >= s + count

        world.wait_until(done, f"{count} more sweeps", 30 + 10 * count)


def _history(backend: str, stack: str) -> list[Path]:
    root = Path(backend.removeprefix("file://")) / ".pulumi" / "history"
    return sorted(p for p in root.rglob("*") if p.is_file() and f"/{stack}/" in str(p))


def test_a_second_cluster_on_the_same_backend_never_runs_the_first_ones_stack(
    world: World,
) -> None:
    a, b = world.a, world.b
    ns = a.namespace()
    a.apply(ns, pool_manifest("web", replicas=2))
    pool = a.wait_ready(ns, "web", 2)
    uid = pool["metadata"]["uid"]
    ids = sorted(str(i["instanceId"]) for i in pool["status"]["instances"])
    world.web = (ns, uid, ids)
    history = _history(world.backend, f"{ns}.web")
    cluster_a = cluster_uid(a.kube)

    _same_namespace(b, ns)  # staging applies production's manifests, on production's backend
    b.apply(ns, pool_manifest("web", replicas=2))
    held = b.wait_until(partial(_condition, b, ns, "web", "StackHeldByAnotherCluster"),
                        "the pool Degraded: StackHeldByAnotherCluster", 90)  # fmt: skip
    assert held["status"] == "True" and cluster_a in held["message"]
    b.wait_until(partial(_event, b, ns, "web", "StackHeldByAnotherCluster"), "the Event", 30)
    b_uid = b.get(ns, "web")["metadata"]["uid"]  # type: ignore[index]

    b.kube.ok("-n", ns, "delete", "spotpool", "web", "--wait=true", "--timeout=90s")
    said = _event(b, ns, "web", "StackHeldByAnotherCluster")
    assert any("pool deleted" in m for m in said), said

    assert _history(world.backend, f"{ns}.web") == history  # no `up`, no destroy: no update
    assert _states(a, ids) == dict.fromkeys(ids, "RUNNING")
    assert a.cloud(uid).keys() == set(ids) and not a.cloud(b_uid)  # nothing launched for B
    for instance in ids:  # never re-tagged with B's cluster or pool
        assert _tags(a, instance)["spotpool-cluster"] == cluster_a
        assert _tags(a, instance)["spotpool-pool-uid"] == uid
    stacks = Path(world.backend.removeprefix("file://")) / ".pulumi" / "stacks" / "spotpool"
    assert list(stacks.glob(f"{ns}.web.json*"))  # the stack is still there
    assert a.wait_ready(ns, "web", 2)["metadata"]["uid"] == uid


def test_an_etcd_clone_holds_both_and_its_deletion_destroys_nothing(world: World) -> None:
    """Cluster B with a pool of its own, then copied whole (etcd's data: the same kube-system
    uid, the same pools, Leases and Secrets) and both started on the same backend."""
    b = world.b
    ns = b.namespace()
    b.apply(ns, pool_manifest("batch", replicas=1))
    pool = b.wait_ready(ns, "batch", 1)
    (instance,) = [str(i["instanceId"]) for i in pool["status"]["instances"]]
    b.stop()
    down(world.directory / "b-cluster")
    shutil.copytree(world.directory / "b-cluster", world.directory / "b2-cluster",
                    ignore=shutil.ignore_patterns("*.sock", "*.log"))  # fmt: skip
    up(world.directory / "b-cluster", tie_to_parent=True)
    state = up(world.directory / "b2-cluster", tie_to_parent=True)
    clone = OperatorWorld(Kube(state.kubeconfig, b.kube.kubectl), b.emulator,
                          world.directory / "b2", env=ENV, backend_url=world.backend)  # fmt: skip
    (world.directory / "b2").mkdir()
    world.extra.append(clone)
    assert cluster_uid(clone.kube) == cluster_uid(b.kube)  # one identity, two clusters
    b.start()
    clone.start()
    for each in (b, clone):
        each.wait_until(partial(_condition, each, ns, "batch", "IdentityConflict"),
                        "the pool Degraded: IdentityConflict", 60)  # fmt: skip
        each.wait_until(partial(_event, each, ns, "batch", "IdentityConflict"), "the Event", 30)
    message = str(_condition(b, ns, "batch", "IdentityConflict"))
    assert "another live operator claims this cluster's identity" in message

    clone.kube.ok("-n", ns, "delete", "spotpool", "batch", "--wait=false")
    _more_passes(3, b, clone)
    assert _states(b, [instance]) == {instance: "RUNNING"}  # the clone destroyed nothing
    assert clone.get(ns, "batch") is not None  # its finalizer waits for a person
    assert "terminated instance" not in clone.log.read_text(errors="replace")
    assert not _event(clone, ns, "batch", "Destroyed")
    clone.stop()
    b.stop()
    down(world.directory / "b2-cluster")


def test_a_copied_cluster_id_holds_both_and_every_instance_lives(world: World) -> None:
    """Cluster B started with A's cluster id (a copied chart value): A's pool is missing from B
    and B's from A, and no backend holds the other's: only the claims keep them."""
    a, b = world.a, world.b
    ns, _, ids = world.web
    assert ids, "needs the first test's world"
    cluster_a = cluster_uid(a.kube)
    b_ns = b.namespace()
    b.apply(b_ns, pool_manifest("jobs", replicas=1, paused=True))  # B's own pool, live in B
    b_uid = b.wait_until(lambda: (b.get(b_ns, "jobs") or {}).get("metadata", {}).get("uid"),
                         "the uid")  # fmt: skip
    b.env["SPOTPOOL_CLUSTER_ID"] = cluster_a
    b.start()  # its claim is written before it serves: live now
    started = time.monotonic()
    # What B made under the copied id (its tags as B's operator writes them); made before B
    # was up, A could sweep it a grace later, before any claim of B's existed.
    made_by_b = launch_tagged(b, b_ns, "jobs", str(b_uid), 0, INSTALL, cluster_a)[1]
    assert re.search(rf"cluster id {cluster_a} \(--cluster-id\) differs from this cluster's "
                     "kube-system uid", b.log.read_text(errors="replace"))  # fmt: skip
    a.wait_until(partial(_condition, a, ns, "web", "IdentityConflict"), "A says so", 60)
    b.wait_until(partial(_condition, b, b_ns, "jobs", "IdentityConflict"), "B says so", 60)
    a.wait_until(partial(_event, a, ns, "web", "IdentityConflict"), "A's Event", 30)
    time.sleep(max(0.0, GRACE - (time.monotonic() - started)))
    _more_passes(3, a, b)  # three sweeps each, past the grace
    everything = [*ids, made_by_b]
    assert _states(a, everything) == dict.fromkeys(everything, "RUNNING")
    for world_ in (a, b):
        assert "terminated instance" not in world_.log.read_text(errors="replace")
    message = str(_condition(a, ns, "web", "IdentityConflict"))
    assert cluster_uid(b.kube) in message  # which other cluster: its kube-system uid
    print(json.dumps({"held passes": [_passes(a), _passes(b)]}))
    b.stop()
    b.env.pop("SPOTPOOL_CLUSTER_ID")


def test_a_copied_cluster_id_on_another_backend_holds_both(world: World) -> None:
    """Cluster B with A's cluster id and a state backend of its own: neither backend holds the
    other's instances, and neither reads the other's claims there; only the claims in the cloud
    account (tag pairs spotpool-claim-<cluster>) keep them."""
    a, b = world.a, world.b
    ns, _, ids = world.web
    assert ids, "needs the first test's world"
    cluster_a = cluster_uid(a.kube)
    a_since = len(a.log.read_text(errors="replace"))
    b.stop()  # (still running when the tests before were not run)
    b.backend_url = None  # its own: file:// under its directory
    b.env["SPOTPOOL_CLUSTER_ID"] = cluster_a
    b.start()
    started = time.monotonic()
    b_ns = b.namespace()
    b.apply(b_ns, pool_manifest("own", replicas=1))
    b_uid = b.wait_until(lambda: (b.get(b_ns, "own") or {}).get("metadata", {}).get("uid"),
                         "the uid")  # fmt: skip
    made_by_b = b.wait_until(lambda: list(b.cloud(str(b_uid))), "B's instance", 60)
    time.sleep(max(0.0, GRACE - (time.monotonic() - started)))
    _more_passes(3, a, b)  # three sweeps each, past the grace
    everything = [*ids, *made_by_b]
    assert _states(a, everything) == dict.fromkeys(everything, "RUNNING")
    b_log = b.log.read_text(errors="replace").rsplit("=== operator start", 1)[-1]
    for text in (a.log.read_text(errors="replace")[a_since:], b_log):
        # (the third test's instance of B's may go: A sweeps it once B stopped, as it should)
        assert not [i for i in everything if f"terminated instance {i}" in text]
    a.wait_until(partial(_condition, a, ns, "web", "IdentityConflict"), "A says so", 30)
    b.wait_until(partial(_condition, b, b_ns, "own", "IdentityConflict"), "B says so", 30)
    a.wait_until(partial(_event, a, ns, "web", "IdentityConflict"), "A's Event", 30)
    message = str(_condition(a, ns, "web", "IdentityConflict"))
    assert cluster_uid(b.kube) in message and "cloud account" in message
    assert cluster_a in str(_condition(b, b_ns, "own", "IdentityConflict"))
    print(json.dumps({"cloud-held passes": [_passes(a), _passes(b)],
                      "seconds": round(time.monotonic() - started, 1)}))  # fmt: skip
    b.stop()
