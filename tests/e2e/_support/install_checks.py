"""Checks of an install on a cluster, shared by the kustomize, deploy-program, Helm and
upgrade tests: the rights an install grants (and never grants), its pod's admission, the
operator run as its pod with the install's service account; the pinned helm as a user runs it."""

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from spotpool.localworld.emulator import wait_until
from spotpool.localworld.kube import Kube
from tests._support.tools import require_tool
from tests.e2e import installs, pod
from tests.e2e.installs import DEPLOY
from tests.operator.world import pool_manifest, secret_manifest

POOLS = "spotpools.devops.jokerbai.com"


CRDS = "customresourcedefinitions.apiextensions.k8s.io"


LEASES = "leases.coordination.k8s.io"


NAMESPACES = ("namespaces", "get list watch")  # kopf, when it serves some namespaces
# The access policies (read; their status written) and namespaces' labels (get), always.
POLICIES = "spotpoolaccesspolicies.devops.jokerbai.com"
ACCESS = {(POLICIES, "get list watch"), (f"{POLICIES}/status", "patch")}
NAMESPACE_LABELS = ("namespaces", "get")
# In its own namespace beside its Leases: the learned interruption counts' ConfigMap (created
# once, then only that one name read and written).
INTERRUPTIONS = {("configmaps", "create"), ("configmaps", "get update")}


def namespaces(kube: Kube, *names: str) -> None:
    """Make the namespaces not there yet."""
    for name in names:
        if kube.run("get", "namespace", name).returncode != 0:
            kube.ok("create", "namespace", name)


def pod_is_admitted(kube: Kube, deployment: dict[str, Any]) -> None:
    """The Deployment's pod passes its namespace's Pod Security admission (no controller makes
    the pod here, so a server-side dry run of it does)."""
    template = deployment["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**template["metadata"], "name": "admission-check"},
        "spec": template["spec"],
    }
    ns = deployment["metadata"]["namespace"]
    result = kube.run("-n", ns, "create", "--dry-run=server", "-f", "-", stdin=json.dumps(pod))
    assert result.returncode == 0, result.stderr
    assert "PodSecurity" not in result.stderr, result.stderr


# Pools whose instances are nodes (the chart's nodeRights, docs/nodes.md): their Nodes and the
# pods on them, of any namespace, evicted through the Eviction API (PDBs honoured).
NODE_RIGHTS = {
    ("nodes", "get list watch patch delete"),
    ("pods", "list"),
    ("pods/eviction", "create"),
}


def nothing_more(kube: Kube, account: str, namespace: str, scan: set[tuple[str, str]]) -> None:
    """The account's whole list of rights in `namespace`, and a few it must never have."""
    assert installs.granted(kube, account, namespace) == {
        (POOLS, "get list watch patch"),
        (f"{POOLS}/status", "patch"),
        ("events", "create"),
        ("secrets", "get"),
        (CRDS, "get list watch"),
        *ACCESS,
        *(scan or {NAMESPACE_LABELS}),
        *NODE_RIGHTS,
    }
    never: list[tuple[str, ...]] = [
        ("list", "secrets"), ("watch", "secrets"), ("create", "secrets"), ("delete", "secrets"),
        ("create", POOLS), ("update", POOLS), ("delete", POOLS),
        ("patch", POOLS, "--subresource=scale"), ("update", POOLS, "--subresource=status"),
        ("patch", "events"), ("delete", "events"),
        ("get", "pods"), ("watch", "pods"), ("create", "pods"), ("delete", "pods"),
        ("update", "pods"), ("patch", "pods"),
        ("create", "pods", "--subresource=exec"),
        ("get", "configmaps"), ("create", "deployments.apps"),
        ("create", "leases.coordination.k8s.io"), ("get", "leases.coordination.k8s.io"),
        ("impersonate", "serviceaccounts"), ("create", "rolebindings.rbac.authorization.k8s.io"),
    ]  # fmt: skip
    for verb, resource, *extra in never:
        assert not installs.can(kube, account, verb, resource, *extra, "-n", namespace), (
            verb, resource, extra,
        )  # fmt: skip
    for verb, resource in (
        ("create", "nodes"), ("update", "nodes"), ("update", "namespaces"),
        ("delete", "namespaces"), ("delete", CRDS),
        ("create", POLICIES), ("update", POLICIES), ("delete", POLICIES),
        ("create", CRDS),
        ("patch", CRDS), ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
    ):  # fmt: skip
        assert not installs.can(kube, account, verb, resource), (verb, resource)


def pool_gpu(kube: Kube, namespace: str) -> dict[str, Any] | None:
    """The pool `gpu` of `namespace`, or None when there is none."""
    result = kube.run("-n", namespace, "get", POOLS, "gpu", "-o", "json")
    if result.returncode != 0:
        assert "NotFound" in result.stderr, result.stderr
        return None
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def events_of(kube: Kube, namespace: str, name: str) -> list[tuple[str, str]]:
    """(type, reason) of the Events about pool `name`."""
    reply = json.loads(
        kube.ok("-n", namespace, "get", "events", "-o", "json",
                "--field-selector", f"involvedObject.name={name},involvedObject.kind=Spotpool")
    )  # fmt: skip
    return [(event["type"], event["reason"]) for event in reply["items"]]


def operator_serves_only_team_a(
    kube: Kube,
    deployment: dict[str, Any],
    namespace: str,
    directory: Path,
    passphrase: str,
) -> None:
    """With a pool `gpu` and its keys in team-a and in other: the operator as its pod runs it
    (pod.py, the install's `deployment`), authenticated with a token of the install's service
    account in `namespace`, converges team-a's pool (reading its Secret, writing status and
    Events, adding its finalizer), destroys it through the finalizer, and leaves other's pool
    alone, with no permission error in its log."""
    for ns in ("team-a", "other"):
        kube.ok("-n", ns, "apply", "-f", "-", stdin=json.dumps(secret_manifest()))
        kube.ok("-n", ns, "apply", "-f", "-", stdin=json.dumps(pool_manifest("gpu")))
    kubeconfig = installs.kubeconfig_for(
        kube, namespace, "spotpool-operator", directory / "operator.kubeconfig"
    )
    env = pod.environment(deployment, kubeconfig, directory / "pod")
    pod.write_passphrase(env, passphrase)
    log = directory / "operator.log"
    with pod.operator(env, log):
        ready = wait_until(
            lambda: (pool_gpu(kube, "team-a") or {}).get("status", {}).get("readyReplicas"),
            "the pool to converge", 180, every=1,
        )  # fmt: skip
        assert ready == 1, log.read_text(errors="replace")[-3000:]
        pool = pool_gpu(kube, "team-a")
        assert pool is not None
        assert "devops.jokerbai.com/finalizer" in pool["metadata"]["finalizers"]
        assert ("Normal", "Converged") in events_of(kube, "team-a", "gpu")
        assert list(Path(env["PULUMI_HOME"], "plugins").glob("resource-tencentcloud-*"))

        kube.ok("-n", "team-a", "delete", POOLS, "gpu", "--wait=false")
        wait_until(lambda: pool_gpu(kube, "team-a") is None, "the pool's stack destroyed", 180)
    other = pool_gpu(kube, "other")
    assert other is not None
    assert "status" not in other and not other["metadata"].get("finalizers")
    text = log.read_text(errors="replace")
    for sign in ("Forbidden", "Not enough permissions", "not readable", "from $PATH"):
        assert sign not in text, text[-3000:]


CHART = DEPLOY / "helm" / "spotpool"


CRD = "spotpools.devops.jokerbai.com"


def helm(kube: Kube, *args: str) -> str:
    """The pinned helm, as a user runs it, against the cluster (its own homes beside it)."""
    home = kube.kubeconfig.parent / "helm"
    env = {
        **os.environ,
        "KUBECONFIG": str(kube.kubeconfig),
        **{f"HELM_{kind}_HOME": str(home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")},
    }
    done = subprocess.run(
        [str(require_tool("helm")), *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def article_pool(namespace: str) -> str:
    """The article's sample Spotpool (the CRD accepts it as it is), in `namespace`."""
    return f"""\
apiVersion: devops.jokerbai.com/v1
kind: Spotpool
metadata: {{name: spotpool-sample, namespace: {namespace}}}
spec:
  secretId: xxx
  secretKey: xxx
  region: ap-singapore
  availabilityZone: ap-singapore-2
  instanceType: GN7.2XLARGE32
  minimum: 2
  maximum: 2
  subnetId: DEFAULT
  vpcId: DEFAULT
  securityGroupIds: [sg-xxx]
  imageId: img-xxx
  instanceChargeType: SPOTPAID
"""
