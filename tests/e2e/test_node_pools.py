"""Pools whose instances are nodes (spec.nodes, docs/nodes.md), end to end on the local world
with nodes (kube-scheduler, KWOK, the node agent): a Deployment and a PDB on a pool's nodes; a
reclaim without notice has the Node deleted and the pods Running again within the replacement's
boot, not 300 s; a scale-down drains before it terminates; a termination notice cordons the node
and moves its pods (PDB respected) onto the surge replacement's node before the cloud takes the
instance; an instance whose node is not Ready within readyTimeoutSeconds is replaced; a pool
without the field has no node rows. One world for the module."""

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from spotpool.localworld.kube import Kube
from spotpool.ports import free_port
from tests.e2e._support.limits import post_notice
from tests.e2e._support.pool_views import by_slot
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
BOOT = 2.0
JOIN = "#!/bin/sh\n# spotpool:join-node\n"
NODES = {"labels": {"spotpool.io/pool": "gpu"}, "drainTimeoutSeconds": 30}


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    directory = tmp_path_factory.mktemp("node-pools")
    env = {"SPOTPOOL_NOTICE_PORT": str(free_port())}  # notices reach the operator here
    with operator_world(
        kube, directory, boot_seconds=BOOT, nodes={"lease_seconds": 20}, refresh_seconds=60,
        env=env,
    ) as made:  # fmt: skip
        yield made


@pytest.fixture(scope="module")
def ns(world: OperatorWorld) -> str:
    return world.namespace()


def pods(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    found = kube.ok("-n", namespace, "get", "pods", "-l", "app=web", "-o", "json")
    return list(json.loads(found)["items"])


def running_on(kube: Kube, namespace: str) -> dict[str, str]:
    """Running pods not being deleted: name -> node."""
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in pods(kube, namespace)
        if p.get("status", {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    }


LATE = {"readyTimeoutSeconds": 30}  # the least allowed: its join never comes


def test_a_pool_whose_instances_never_join_starts(world: OperatorWorld, ns: str) -> None:
    """Applied first, checked last (its 30 s run beside the other tests)."""
    world.apply(ns, pool_manifest("late", replicas=1, userData="#!/bin/sh\necho no join\n",
                                  nodes=LATE, terminationNotices={"enabled": False}))  # fmt: skip
    world.wait_ready(ns, "late", 1)


def test_a_pool_without_the_field_has_no_node_rows(world: OperatorWorld, ns: str) -> None:
    world.apply(ns, pool_manifest("plain", replicas=1, userData=JOIN,
                                  terminationNotices={"enabled": False}))  # fmt: skip
    pool = world.wait_ready(ns, "plain", 1)
    assert "nodes" not in pool["status"] or pool["status"]["nodes"] == []
    world.kube.ok("-n", ns, "delete", "spotpools", "plain", "--wait=false")


def test_the_pools_nodes_are_labelled_and_its_deployment_runs_there(
    world: OperatorWorld, ns: str
) -> None:
    world.apply(ns, pool_manifest("gpu", replicas=2, userData=JOIN, nodes=NODES))
    world.wait_ready(ns, "gpu", 2)

    def nodes_ready() -> list[dict[str, Any]] | None:
        rows = world.status(ns, "gpu").get("nodes") or []
        return rows if len(rows) == 2 and all(r.get("ready") for r in rows) else None

    rows = world.wait_until(nodes_ready, "both nodes Ready in status.nodes", timeout=90)
    for row in rows:
        node = json.loads(world.kube.ok("get", "node", row["node"], "-o", "json"))
        assert node["metadata"]["labels"]["spotpool.io/pool"] == "gpu"
    web = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "nodeSelector": {"spotpool.io/pool": "gpu"},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "pause"}],
                },
            },
        },
    }
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }
    world.kube.ok("-n", ns, "apply", "-f", "-", stdin=json.dumps(web))
    world.kube.ok("-n", ns, "apply", "-f", "-", stdin=json.dumps(budget))  # fmt: skip
    world.wait_until(lambda: len(running_on(world.kube, ns)) == 2 or None, "web running", 90)


def test_a_reclaim_deletes_the_node_and_the_pods_run_again_within_the_boot(
    world: OperatorWorld, ns: str
) -> None:
    status = world.status(ns, "gpu")
    nodes = {r["instanceId"]: r["node"] for r in status["nodes"]}
    where = running_on(world.kube, ns)
    victim = next(i for i, node in nodes.items() if node in where.values())
    gone = nodes[victim]
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [victim]})
    reclaimed = time.monotonic()
    world.wait_until(lambda: "NodeGone" in world.reasons(ns, "gpu") or None, "NodeGone", 60)
    assert world.kube.run("get", "node", gone).returncode != 0  # deleted, not left NotReady

    def back() -> dict[str, str] | None:
        now = running_on(world.kube, ns)
        return now if len(now) == 2 and gone not in now.values() else None

    world.wait_until(back, "both web pods Running again off the reclaimed node", timeout=60)
    took = time.monotonic() - reclaimed
    assert took < 60, took  # seconds, not the node monitor's 40 s and the 300 s toleration
    print(f"pods Running again {took:.1f} s after the reclaim")


def test_a_scale_down_drains_before_it_terminates(world: OperatorWorld, ns: str) -> None:
    world.wait_ready(ns, "gpu", 2)
    going = by_slot(world.status(ns, "gpu"))[1]
    world.kube.ok("-n", ns, "patch", "spotpools", "gpu", "--type=merge",
                  "-p", json.dumps({"spec": {"replicas": 1}}))  # fmt: skip
    world.wait_ready(ns, "gpu", 1)
    reasons = world.reasons(ns, "gpu")
    assert "Drained" in reasons, reasons
    drained = [m for _, r, m in world.events(ns, "gpu") if r == "Drained"]
    assert any(going.lower() in m for m in drained), drained
    world.wait_until(lambda: len(running_on(world.kube, ns)) == 2 or None, "web again", 60)
    world.wait_until(  # terminated by the operator: its Node goes with it
        lambda: world.kube.run("get", "node", going.lower()).returncode != 0 or None,
        "the scaled-down instance's Node deleted", 30,
    )  # fmt: skip


def test_a_notice_moves_the_pods_to_the_replacement_before_the_cloud_takes_the_node(
    world: OperatorWorld, ns: str
) -> None:
    """After the scale-down both web pods run on the one node left; the PDB keeps one of them
    available (a second eviction is refused until the first pod runs again on the surge's
    node), sampled all along."""
    pool = world.wait_ready(ns, "gpu", 1)
    victim, uid = by_slot(pool["status"])[0], pool["metadata"]["uid"]
    old = victim.lower()
    world.wait_until(
        lambda: list(running_on(world.kube, ns).values()) == [old, old] or None,
        "both web pods on the one node left", 30,
    )  # fmt: skip
    code, message = post_notice(world, victim)
    assert code < 300, message
    noticed, fewest = time.monotonic(), 2

    def moved() -> dict[str, str] | None:
        nonlocal fewest
        now = running_on(world.kube, ns)
        fewest = min(fewest, len(now))
        return now if len(now) == 2 and old not in now.values() else None

    where = world.wait_until(moved, "both web pods Running off the noticed node", timeout=90)
    took = time.monotonic() - noticed
    assert world.cloud(uid).get(victim) == "RUNNING"  # the cloud has not taken it yet
    (surge,) = world.status(ns, "gpu")["surges"]
    assert set(where.values()) == {surge["instanceId"].lower()}, (where, surge)
    assert fewest >= 1  # the PDB: never both pods gone at once
    node = json.loads(world.kube.ok("get", "node", old, "-o", "json"))
    assert node["spec"].get("unschedulable") is True

    def drained() -> str | None:
        said = [m for _, r, m in world.events(ns, "gpu") if r == "Drained" and old in m]
        return said[-1] if said else None

    message = world.wait_until(drained, "the noticed node's Drained event", timeout=30)
    assert "2 pod(s) evicted" in message and "deadline" not in message, message
    print(f"pods Running on the replacement's node {took:.1f} s after the notice")
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [victim]})
    world.wait_until(
        lambda: by_slot(world.status(ns, "gpu")).get(0) == surge["instanceId"] or None,
        "the surge instance takes the slot", timeout=60,
    )  # fmt: skip
    assert len(running_on(world.kube, ns)) == 2


def test_an_instance_without_a_ready_node_in_time_is_replaced(
    world: OperatorWorld, ns: str
) -> None:
    pool = world.get(ns, "late") or {}
    first = by_slot(pool["status"])[0]

    def replaced() -> str | None:
        now = by_slot(world.status(ns, "late")).get(0)
        return now if now and now != first and "Replaced" in world.reasons(ns, "late") else None

    second = world.wait_until(replaced, "the late instance replaced", timeout=90)
    said = [m for _, r, m in world.events(ns, "late") if r == "NodeNotReady"]
    # `first` may be a replacement already (the pool has run since its fixture): any round.
    assert any(first in m and "failed launch" in m for m in said), said
    world.wait_until(lambda: first not in world.cloud(pool["metadata"]["uid"]) or None,
                     "the late instance terminated", timeout=30)  # fmt: skip
    assert second in world.cloud(pool["metadata"]["uid"])
    world.kube.ok("-n", ns, "delete", "spotpools", "late", "--wait=false")  # no second round
