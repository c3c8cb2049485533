"""Drains (operator/spotpool_operator/nodes) against the session's real kube-apiserver and
kube-controller-manager: Node and Pod objects made directly (no kubelet, no scheduler: a thread
plays the kubelet and the ReplicaSet where a test needs pods to go and come back), a real
PodDisruptionBudget, the real Eviction API."""

import asyncio
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from prometheus_client import CollectorRegistry
from spotpool_operator.nodes.draining import drain, stays
from spotpool_operator.nodes.keeper import NodeKeeper
from spotpool_operator.nodes.kubejson import NodeApi

from spotpool.api.nodes import INSTANCE_LABEL, NodesSpec, NodeTaint, TaintEffect
from spotpool.api.status import Instance, SpotpoolStatus
from spotpool.localworld.kube import Kube

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def api(kube: Kube) -> NodeApi:
    client = kubernetes.config.new_client_from_config(str(kube.kubeconfig))  # type: ignore[no-untyped-call]
    return NodeApi(kubernetes.client.CoreV1Api(client))


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    name = f"drain-{uuid.uuid4().hex[:6]}"
    kube.ok("create", "namespace", name)
    deadline = time.monotonic() + 30  # pods are admitted once its default account exists
    while kube.run("-n", name, "get", "serviceaccount", "default").returncode != 0:
        assert time.monotonic() < deadline, "no default service account"
        time.sleep(0.3)
    yield name
    kube.run("delete", "namespace", name, "--wait=false")


def make_node(kube: Kube, instance: str) -> str:
    name = instance.lower()
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {INSTANCE_LABEL: instance}},
            "spec": {"providerID": f"qcloud:///ap-test-1/{instance}"}}  # fmt: skip
    kube.ok("apply", "-f", "-", stdin=json.dumps(node))
    return name


def make_pod(
    kube: Kube, namespace: str, name: str, node: str, labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None, owner: dict[str, Any] | None = None,
    grace: int = 30,
) -> None:  # fmt: skip
    """A pod bound to `node`, Running and Ready (as a kubelet would report it)."""
    meta: dict[str, Any] = {"name": name, "labels": labels or {}, "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [owner]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
           "spec": {"nodeName": node, "terminationGracePeriodSeconds": grace,
                    "containers": [{"name": "c", "image": "pause"}]}}  # fmt: skip
    kube.ok("-n", namespace, "apply", "-f", "-", stdin=json.dumps(pod))
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": now}]}}  # fmt: skip
    kube.ok("-n", namespace, "patch", "pod", name, "--subresource=status", "--type=merge",
            "-p", json.dumps(status))  # fmt: skip


def pdb(kube: Kube, namespace: str, min_available: int) -> None:
    budget = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
              "metadata": {"name": "web"},
              "spec": {"minAvailable": min_available,
                       "selector": {"matchLabels": {"app": "web"}}}}  # fmt: skip
    kube.ok("-n", namespace, "apply", "-f", "-", stdin=json.dumps(budget))
    deadline = time.monotonic() + 30  # the disruption controller counts the healthy pods
    while time.monotonic() < deadline:
        found = json.loads(kube.ok("-n", namespace, "get", "pdb", "web", "-o", "json"))
        if found.get("status", {}).get("currentHealthy", 0) >= min_available:
            return
        time.sleep(0.5)
    raise AssertionError(f"the PDB never counted its pods: {found.get('status')}")


def pods(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    return list(json.loads(kube.ok("-n", namespace, "get", "pods", "-o", "json"))["items"])


class Kubelet(threading.Thread):
    """Plays the kubelet of the drained node and the ReplicaSet: a pod being deleted is removed
    (grace 0) and a Ready successor made on `spare` — so the PDB allows the next eviction."""

    def __init__(self, kube: Kube, namespace: str, spare: str) -> None:
        super().__init__(daemon=True)
        self.kube, self.namespace, self.spare = kube, namespace, spare
        self.stop = threading.Event()
        self.moved: list[str] = []

    def run(self) -> None:
        while not self.stop.wait(0.3):
            for pod in pods(self.kube, self.namespace):
                meta = pod["metadata"]
                if meta.get("deletionTimestamp") and meta["name"] not in self.moved:
                    self.moved.append(meta["name"])
                    self.kube.run("-n", self.namespace, "delete", "pod", meta["name"],
                                  "--grace-period=0", "--force")  # fmt: skip
                    make_pod(self.kube, self.namespace, f"{meta['name']}-again", self.spare,
                             labels=meta.get("labels"))  # fmt: skip


def test_a_drain_asks_the_pdb_again_until_it_allows_and_leaves_daemonset_pods(
    kube: Kube, api: NodeApi, namespace: str
) -> None:
    node, spare = make_node(kube, "ins-drain1"), make_node(kube, "ins-spare1")
    daemons = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"ds": "agent"}},
            "template": {
                "metadata": {"labels": {"ds": "agent"}},
                "spec": {
                    "nodeSelector": {"nowhere": "true"},
                    "containers": [{"name": "c", "image": "p"}],
                },
            },
        },
    }
    kube.ok("-n", namespace, "apply", "-f", "-", stdin=json.dumps(daemons))  # fmt: skip
    uid = kube.ok("-n", namespace, "get", "ds", "agent", "-o", "jsonpath={.metadata.uid}")
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": uid}
    make_pod(kube, namespace, "agent-x", node, owner=owner)
    for index in range(3):
        make_pod(kube, namespace, f"web-{index}", node, labels={"app": "web"})
    pdb(kube, namespace, 2)  # one disruption at a time
    kubelet = Kubelet(kube, namespace, spare)
    kubelet.start()
    try:
        result = drain(api, node, time.monotonic() + 60, voluntary=True)
    finally:
        kubelet.stop.set()
        kubelet.join()
    assert not result.timed_out, result
    assert result.evicted == {f"{namespace}/web-{i}" for i in range(3)}
    assert result.refused >= 1  # the PDB said 429 at least once: asked again, not forced
    left = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods(kube, namespace)}
    assert left["agent-x"] == node  # the DaemonSet's pod stays
    assert sorted(n for n, where in left.items() if where == spare) == [
        "web-0-again", "web-1-again", "web-2-again"
    ]  # fmt: skip
    found = json.loads(kube.ok("get", "node", node, "-o", "json"))
    assert found["spec"]["unschedulable"] is True  # cordoned first


def test_the_deadline_ends_a_drain_a_pdb_holds_and_caps_each_pods_grace(
    kube: Kube, api: NodeApi, namespace: str
) -> None:
    node = make_node(kube, "ins-drain2")
    make_pod(kube, namespace, "web-0", node, labels={"app": "web"})
    make_pod(kube, namespace, "slow", node, grace=600)
    pdb(kube, namespace, 1)  # web-0 may never go
    started = time.monotonic()
    result = drain(api, node, started + 4, voluntary=False)
    took = time.monotonic() - started
    assert result.timed_out and 3.5 <= took < 8, (result, took)
    assert result.evicted == {f"{namespace}/slow"} and result.refused >= 2
    by_name = {p["metadata"]["name"]: p for p in pods(kube, namespace)}
    assert "deletionTimestamp" not in by_name["web-0"]["metadata"]  # the PDB held it
    assert by_name["slow"]["metadata"]["deletionGracePeriodSeconds"] <= 4  # not its 600 s


def test_do_not_disrupt_holds_a_voluntary_drain_not_a_notices(
    kube: Kube, api: NodeApi, namespace: str
) -> None:
    node = make_node(kube, "ins-drain3")
    make_pod(kube, namespace, "train", node, annotations={"karpenter.sh/do-not-disrupt": "true"})
    voluntary = drain(api, node, time.monotonic() + 2, voluntary=True)
    assert voluntary.timed_out and not voluntary.evicted
    assert voluntary.protected == [f"{namespace}/train"]
    noticed = drain(api, node, time.monotonic() + 2, voluntary=False)
    assert noticed.evicted == {f"{namespace}/train"}


def test_the_keeper_labels_taints_reports_and_deletes_a_reclaimed_node(
    kube: Kube, api: NodeApi, namespace: str
) -> None:
    node = make_node(kube, "ins-keep1")
    make_pod(kube, namespace, "web-0", node, labels={"app": "web"})
    posted: list[tuple[str, str]] = []

    class Events:
        def post(self, ref: dict[str, Any], type_: str, reason: str, message: str) -> None:
            posted.append((reason, message))

    class Ref:
        namespace, name = "team", "pool"
        logger = logging.getLogger("test")

        def event_ref(self) -> dict[str, Any]:
            return {}

    keeper = NodeKeeper(api, Events(), CollectorRegistry())
    spec = NodesSpec(
        labels={"gpu": "a100"},
        taints=[NodeTaint(key="gpu", value="yes", effect=TaintEffect.NO_SCHEDULE)],
    )
    status = SpotpoolStatus(instances=[
        Instance(instance_id="ins-keep1", slot=0, state="RUNNING"),
        Instance(instance_id="ins-nonode", slot=1, state="RUNNING")])  # fmt: skip
    rows, late = asyncio.run(keeper.observe(Ref(), spec, status))
    assert [(r.slot, r.node, r.ready) for r in rows] == [(0, node, False), (1, None, False)]
    assert late == []  # not yet readyTimeoutSeconds
    found = json.loads(kube.ok("get", "node", node, "-o", "json"))
    assert found["metadata"]["labels"]["gpu"] == "a100"
    assert found["spec"]["taints"] == [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]
    asyncio.run(keeper.gone(Ref(), ["ins-keep1"]))
    assert kube.run("get", "node", node).returncode != 0  # deleted at once
    assert pods(kube, namespace) == []  # evicted with no grace: rescheduled now
    assert [reason for reason, _ in posted] == ["NodeGone"]


def test_daemonset_mirror_and_finished_pods_stay() -> None:
    assert stays({"metadata": {"ownerReferences": [{"kind": "DaemonSet"}]}})
    assert stays({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}})
    assert stays({"metadata": {}, "status": {"phase": "Succeeded"}})
    assert not stays({"metadata": {"ownerReferences": [{"kind": "ReplicaSet"}]}})
