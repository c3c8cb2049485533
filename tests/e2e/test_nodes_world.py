"""The local world with nodes (issue 47, build 4), end to end on the real kube-apiserver,
kube-controller-manager and kube-scheduler, KWOK, the node agent, an operator and the emulator:
a pool whose user data joins gets one Ready Node per instance within seconds of RUNNING (TKE's
provider id, the instance-id label), a pool without the join line gets none, a Deployment's
pods are scheduled onto the nodes and run (a deleted one goes after its grace), and a
reclaimed instance's Node stays but its heartbeats (the node Lease) stop while the others' go
on."""

import json
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from spotpool.localworld.kube import Kube
from spotpool.localworld.node_agent import INSTANCE_LABEL, JOIN_MARKER, MANAGED_LABEL
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
LEASE_SECONDS = 8  # renewed every 2 s: a stop shows within seconds
JOIN = f"#!/bin/sh\n{JOIN_MARKER}\necho joined\n"


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    directory = tmp_path_factory.mktemp("nodes-world")
    with operator_world(kube, directory, nodes={"lease_seconds": LEASE_SECONDS}) as world:
        yield world


def _json(kube: Kube, *args: str) -> Any:
    return json.loads(kube.ok(*args, "-o", "json"))


def _nodes(kube: Kube) -> dict[str, dict[str, Any]]:
    """instance id -> its Node."""
    return {
        n["metadata"]["labels"][INSTANCE_LABEL]: n
        for n in _json(kube, "get", "nodes")["items"]
        if INSTANCE_LABEL in n["metadata"].get("labels", {})
    }


def _ready_since(node: dict[str, Any]) -> float | None:
    for condition in node.get("status", {}).get("conditions") or []:
        if condition["type"] == "Ready" and condition["status"] == "True":
            return datetime.fromisoformat(condition["lastTransitionTime"]).timestamp()
    return None


def _renewed(kube: Kube, name: str) -> str:
    lease = _json(kube, "-n", "kube-node-lease", "get", "lease", name)
    return str(lease["spec"]["renewTime"])


def _deployment(replicas: int) -> dict[str, Any]:
    on_pool_nodes = {"matchExpressions": [{"key": INSTANCE_LABEL, "operator": "Exists"}]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainer"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "trainer"}},
            "template": {
                "metadata": {"labels": {"app": "trainer"}},
                "spec": {
                    "affinity": {"nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [on_pool_nodes]}}},
                    "containers": [{"name": "main", "image": "trainer:1"}],
                },
            },
        },
    }  # fmt: skip


def test_joined_instances_are_ready_nodes_that_run_pods_until_reclaimed(
    world: OperatorWorld,
) -> None:
    kube, ns = world.kube, world.namespace()
    world.apply(ns, pool_manifest("joined", replicas=2, userData=JOIN))
    world.apply(ns, pool_manifest("plain", replicas=1, userData="#!/bin/sh\necho plain\n"))
    joined = world.wait_ready(ns, "joined", 2)
    plain = world.wait_ready(ns, "plain", 1)
    instances = {i["instanceId"] for i in joined["status"]["instances"]}
    nodes = world.wait_until(
        lambda: (n := _nodes(kube)) and set(n) == instances and all(map(_ready_since, n.values()))
        and n, "a Ready Node for each joined instance", timeout=20,
    )  # fmt: skip

    # Ready within seconds of RUNNING (the emulator boots in 1 s), TKE's provider id.
    cloud = {i["InstanceId"]: i for i in world.emulator.all_instances()}
    for instance_id, node in nodes.items():
        zone = cloud[instance_id]["Zone"]
        assert node["metadata"]["name"] == instance_id.lower()
        assert node["spec"]["providerID"] == f"qcloud:///{zone}/{instance_id}"
        lag = (_ready_since(node) or 0) - cloud[instance_id]["CreatedAt"]
        assert lag < 1.0 + 5.0, f"{instance_id}: Ready {lag:.1f} s after its launch"
    assert not {i["instanceId"] for i in plain["status"]["instances"]} & set(_nodes(kube))

    # The real scheduler binds the pods to the pool's nodes; KWOK runs them.
    world.apply(ns, _deployment(4))

    def running() -> list[dict[str, Any]] | None:
        pods = _json(kube, "-n", ns, "get", "pods", "-l", "app=trainer")["items"]
        up = [p for p in pods if p["status"].get("phase") == "Running"]
        return up if len(up) == 4 else None

    pods = world.wait_until(running, "4 trainer pods Running", timeout=30)
    assert {p["spec"]["nodeName"] for p in pods} <= {i.lower() for i in instances}

    # A deleted pod goes at the end of its grace, as its kubelet would let it.
    victim = pods[0]["metadata"]["name"]
    deleted = time.monotonic()  # before the call: the grace runs from the server's accept
    kube.ok("-n", ns, "delete", "pod", victim, "--grace-period=3", "--wait=false")
    time.sleep(1.5)
    assert _json(kube, "-n", ns, "get", "pod", victim)["metadata"].get("deletionTimestamp")
    world.wait_until(
        lambda: "NotFound" in kube.run("-n", ns, "get", "pod", victim).stderr,
        "the deleted pod gone after its grace", timeout=10,
    )  # fmt: skip
    assert time.monotonic() - deleted >= 2.5

    # A reclaim: the Node stays, its heartbeats stop, the other node's go on.
    gone, kept = sorted(instances)
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [gone]})
    world.wait_until(
        lambda: MANAGED_LABEL not in _nodes(kube)[gone]["metadata"]["labels"],
        f"the node agent to stop {gone}'s kubelet", timeout=10,
    )  # fmt: skip
    before = {name: _renewed(kube, name.lower()) for name in (gone, kept)}
    time.sleep(LEASE_SECONDS / 4 * 2 + 1)  # two renewals and a second
    after = {name: _renewed(kube, name.lower()) for name in (gone, kept)}
    assert after[gone] == before[gone], "a reclaimed instance's node still heartbeats"
    assert after[kept] != before[kept], "a running instance's node stopped heartbeating"
    assert gone in _nodes(kube), "the Node went with its kubelet (a kubelet leaves it)"

    # The operator's replacement joins as a node of its own.
    replaced = world.wait_ready(ns, "joined", 2)
    new = {i["instanceId"] for i in replaced["status"]["instances"]} - instances
    world.wait_until(
        lambda: new and all(_ready_since(_nodes(kube).get(i) or {}) for i in new),
        "the replacement's Node Ready", timeout=30,
    )  # fmt: skip
