"""The operator's install on a real kube-apiserver: the kustomization and the rendered YAML
apply, every object is stored as configured, the service account may do what the operator
does and nothing more, the operator runs with only those rights, and deleting removes it all.

A cluster of its own: deleting an install deletes the Spotpool CRD, which the session cluster's
other tests need. Its kube-controller-manager makes the Deployment's ReplicaSet and pod, but no
kubelet runs, so the pod never starts: nothing waits for one; the operator runs as a process the
way its pod would run it (pod.py).
"""

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spotpool.localworld.kube import Kube
from tests.conftest import require_tool
from tests.e2e import installs, pod
from tests.e2e.conftest import local_cluster
from tests.emulator.harness import SECRET_ID, SECRET_KEY, start_emulator
from tests.operator.world import pool_manifest

pytestmark = pytest.mark.e2e

POOLS = "spotpools.devops.jokerbai.com"
CRDS = "customresourcedefinitions.apiextensions.k8s.io"
LEASES = "leases.coordination.k8s.io"
CHART_COMPONENT = "kubernetes:helm.sh/v4:Chart"  # the Pulumi program's one resource of its own
NAMESPACES = ("namespaces", "list watch")  # kopf, when it serves some namespaces


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    with local_cluster(tmp_path_factory.mktemp("install-cluster")) as kube:
        yield kube


def namespaces(kube: Kube, *names: str) -> None:
    for name in names:
        if kube.run("get", "namespace", name).returncode != 0:
            kube.ok("create", "namespace", name)


def _delete(kube: Kube, directory: Path) -> None:
    wanted = installs.objects(directory)
    kube.ok("delete", "-k", str(directory), "--wait=false")
    installs.wait_gone(kube, wanted)


def test_the_kustomization_installs_everything_as_configured_and_deletes_cleanly(
    cluster: Kube,
) -> None:
    wanted = installs.objects(installs.KUSTOMIZE)
    kinds = [obj["kind"] for obj in wanted]
    assert kinds.count("ClusterRole") == 2 and "Deployment" in kinds
    roles = [
        (o["metadata"]["namespace"], o["metadata"]["name"]) for o in wanted if o["kind"] == "Role"
    ]
    assert roles == [("spotpool-system", "spotpool-operator-lease")]  # the Lease alone

    cluster.ok("apply", "-k", str(installs.KUSTOMIZE))
    cluster.ok("wait", "--for=condition=Established", f"crd/{POOLS}", "--timeout=30s")
    installs.assert_installed(cluster, wanted)
    _admitted_as_restricted(cluster, wanted)

    account = "system:serviceaccount:spotpool-system:spotpool-operator"
    namespaces(cluster, "team-a")
    for where in (["-n", "team-a"], ["-n", "default"], ["--all-namespaces"]):
        for verb in ("get", "list", "watch", "patch"):
            assert installs.can(cluster, account, verb, POOLS, *where), (verb, where)
        assert installs.can(cluster, account, "patch", POOLS, "--subresource=status", *where)
        assert installs.can(cluster, account, "create", "events", *where)
        assert installs.can(cluster, account, "get", "secrets", *where)
    for verb in ("get", "list", "watch"):
        assert installs.can(cluster, account, verb, CRDS)
    _nothing_more(cluster, account, "team-a", set())
    assert not installs.can(cluster, account, "list", "namespaces")  # kopf: not cluster-wide
    for verb in ("get", "list", "create", "update", "delete"):  # shard and member Leases,
        assert installs.can(cluster, account, verb, LEASES, "-n", "spotpool-system"), verb
    assert not installs.can(cluster, account, "patch", LEASES, "-n", "spotpool-system")
    assert not installs.can(cluster, account, "list", LEASES, "-n", "team-a")  # its ns only
    assert not installs.can(cluster, account, "get", LEASES, "--all-namespaces")

    _delete(cluster, installs.KUSTOMIZE)
    assert cluster.run("get", "crd", POOLS).returncode != 0


def _admitted_as_restricted(kube: Kube, wanted: list[dict[str, Any]]) -> None:
    """The install's namespace enforces `restricted` Pod Security, and its Deployment's pod
    passes it."""
    (namespace,) = [o for o in wanted if o["kind"] == "Namespace"]
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    (deployment,) = [o for o in wanted if o["kind"] == "Deployment"]
    pod_is_admitted(kube, deployment)


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


def test_an_install_for_some_namespaces_grants_rights_only_there(
    cluster: Kube, tmp_path: Path
) -> None:
    settings = tmp_path / "install.yaml"  # notices on: the port and its Service apply too
    settings.write_text(
        "notices: {enabled: true, serviceType: LoadBalancer, serviceAnnotations:"
        " {service.kubernetes.io/qcloud-loadbalancer-internal-subnetid: subnet-1}}\n"
    )
    directory = installs.render(
        tmp_path / "k", "--values", str(settings), "--namespace", "pools-system",
        "--set", "watchNamespaces=[team-a, team-b]",
    )  # fmt: skip
    wanted = installs.objects(directory)
    assert ("Service", "pools-system", "spotpool-operator-notices") in {_key(o) for o in wanted}
    assert [o["metadata"]["namespace"] for o in wanted if o["kind"] == "Role"] == [
        "pools-system",  # the Lease's
        "team-a",
        "team-b",
    ]
    namespaces(cluster, "team-a", "team-b", "other")
    cluster.ok("apply", "-k", str(directory))
    installs.assert_installed(cluster, wanted)

    account = "system:serviceaccount:pools-system:spotpool-operator"
    for ns in ("team-a", "team-b"):
        for verb in ("get", "list", "watch", "patch"):
            assert installs.can(cluster, account, verb, POOLS, "-n", ns)
        assert installs.can(cluster, account, "patch", POOLS, "--subresource=status", "-n", ns)
        assert installs.can(cluster, account, "create", "events", "-n", ns)
        assert installs.can(cluster, account, "get", "secrets", "-n", ns)
        _nothing_more(cluster, account, ns, {NAMESPACES})
    for ns in ("other", "default", "kube-system", "pools-system"):  # its own namespace too
        for verb, resource in (("get", "secrets"), ("list", POOLS), ("create", "events")):
            assert not installs.can(cluster, account, verb, resource, "-n", ns), (verb, ns)
        lease = {(LEASES, "get list create update delete")} if ns == "pools-system" else set()
        assert installs.granted(cluster, account, ns) == {
            (CRDS, "get list watch"), NAMESPACES, *lease,
        }  # fmt: skip
    assert not installs.can(cluster, account, "list", POOLS, "--all-namespaces")
    assert not installs.can(cluster, account, "get", "secrets", "--all-namespaces")

    _delete(cluster, directory)
    assert cluster.run("get", "namespace", "team-a").returncode == 0  # not the install's


def _nothing_more(kube: Kube, account: str, namespace: str, scan: set[tuple[str, str]]) -> None:
    """The account's whole list of rights in `namespace`, and a few it must never have."""
    assert installs.granted(kube, account, namespace) == {
        (POOLS, "get list watch patch"),
        (f"{POOLS}/status", "patch"),
        ("events", "create"),
        ("secrets", "get"),
        (CRDS, "get list watch"),
        *scan,
    }
    never: list[tuple[str, ...]] = [
        ("list", "secrets"), ("watch", "secrets"), ("create", "secrets"), ("delete", "secrets"),
        ("create", POOLS), ("update", POOLS), ("delete", POOLS),
        ("patch", POOLS, "--subresource=scale"), ("update", POOLS, "--subresource=status"),
        ("patch", "events"), ("delete", "events"),
        ("get", "pods"), ("list", "pods"), ("create", "pods"),
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
        ("list", "nodes"), ("get", "namespaces"), ("delete", "namespaces"), ("delete", CRDS),
        ("create", CRDS),
        ("patch", CRDS), ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
    ):  # fmt: skip
        assert not installs.can(kube, account, verb, resource), (verb, resource)


def _wait(what: str, check: Any, timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def _pool(kube: Kube, namespace: str) -> dict[str, Any] | None:
    result = kube.run("-n", namespace, "get", POOLS, "gpu", "-o", "json")
    if result.returncode != 0:
        assert "NotFound" in result.stderr, result.stderr
        return None
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def _events(kube: Kube, namespace: str, name: str) -> list[tuple[str, str]]:
    reply = json.loads(
        kube.ok("-n", namespace, "get", "events", "-o", "json",
                "--field-selector", f"involvedObject.name={name},involvedObject.kind=Spotpool")
    )  # fmt: skip
    return [(event["type"], event["reason"]) for event in reply["items"]]


def operator_serves_only_team_a(
    cluster: Kube, deployment: dict[str, Any], namespace: str, directory: Path, passphrase: str
) -> None:
    """With a pool `gpu` and its keys in team-a and in other: the operator as its pod runs it
    (pod.py, the install's `deployment`), authenticated with a token of the install's service
    account in `namespace`, converges team-a's pool (reading its Secret, writing status and
    Events, adding its finalizer), destroys it through the finalizer, and leaves other's pool
    alone, with no permission error in its log."""
    for ns in ("team-a", "other"):
        cluster.ok("-n", ns, "create", "secret", "generic", "tencentcloud",
                   f"--from-literal=secretId={SECRET_ID}",
                   f"--from-literal=secretKey={SECRET_KEY}")  # fmt: skip
        cluster.ok("-n", ns, "apply", "-f", "-", stdin=json.dumps(pool_manifest("gpu")))
    kubeconfig = installs.kubeconfig_for(
        cluster, namespace, "spotpool-operator", directory / "operator.kubeconfig"
    )
    env = pod.environment(deployment, kubeconfig, directory / "pod")
    pod.write_passphrase(env, passphrase)
    log = directory / "operator.log"
    with pod.operator(env, log):
        ready = _wait(
            "the pool to converge",
            lambda: (_pool(cluster, "team-a") or {}).get("status", {}).get("readyReplicas"),
        )
        assert ready == 1, log.read_text(errors="replace")[-3000:]
        pool = _pool(cluster, "team-a")
        assert pool is not None
        assert "devops.jokerbai.com/finalizer" in pool["metadata"]["finalizers"]
        assert ("Normal", "Converged") in _events(cluster, "team-a", "gpu")
        assert list(Path(env["PULUMI_HOME"], "plugins").glob("resource-tencentcloud-*"))

        cluster.ok("-n", "team-a", "delete", POOLS, "gpu", "--wait=false")
        _wait("the pool's stack destroyed", lambda: _pool(cluster, "team-a") is None)
    other = _pool(cluster, "other")
    assert other is not None
    assert "status" not in other and not other["metadata"].get("finalizers")
    text = log.read_text(errors="replace")
    for sign in ("Forbidden", "Not enough permissions", "not readable", "from $PATH"):
        assert sign not in text, text[-3000:]


def test_the_operator_runs_with_nothing_but_its_accounts_rights(
    cluster: Kube, tmp_path: Path
) -> None:
    """The operator as its pod runs it (pod.py), authenticated as the install's service
    account, against the emulator: it converges the pool in the namespace it serves (reading
    the pool's Secret, writing status and Events, adding and later removing its finalizer)
    and leaves the pool in another namespace alone, with no permission error in its log."""
    require_tool("pulumi")
    require_tool("pulumi-resource-tencentcloud")
    emulator = start_emulator(tmp_path / "cloud.db", tmp_path / "emulator.log", boot_seconds=1)
    settings = tmp_path / "install.yaml"
    settings.write_text(f"watchNamespaces: [team-a]\ncloudEndpoint: {emulator.endpoint}\n")
    directory = installs.render(tmp_path / "k", "--values", str(settings))
    (deployment,) = [o for o in installs.objects(directory) if o["kind"] == "Deployment"]
    namespaces(cluster, "team-a", "other")
    cluster.ok("apply", "-k", str(directory))
    try:
        operator_serves_only_team_a(
            cluster, deployment, "spotpool-system", tmp_path, "install-e2e-passphrase"
        )
    finally:
        emulator.stop()
        cluster.run("-n", "team-a", "patch", POOLS, "gpu", "--type=merge",
                    "-p", '{"metadata":{"finalizers":null}}')  # fmt: skip
        _delete(cluster, directory)


def test_the_deploy_program_creates_what_the_kustomization_does_updates_and_destroys(
    cluster: Kube, tmp_path: Path
) -> None:
    """The three install forms are one: the Pulumi program (the chart through helm.v4.Chart,
    inline through the Automation API) creates exactly the objects of the kustomization
    rendered with the same values, each as configured (and the committed kustomization is the
    chart's defaults: tests/deploy/test_kustomize.py; Helm's own install: test_helm.py). An
    `up` with other values moves the Role to the newly watched namespace; `destroy` removes it
    all (foreground deletion: the controller manager's garbage collector)."""
    require_tool("pulumi")
    require_tool("pulumi-resource-kubernetes")
    namespaces(cluster, "team-a", "team-b")
    state = tmp_path / "state"

    def pulumi(operation: str, watch: str) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "spotpool_deploy", "run", operation, "--stack", "e2e",
             "--state", f"file://{state}", "--kubeconfig", str(cluster.kubeconfig),
             "--skip-await", "--set", f"watchNamespaces=[{watch}]"],
            cwd=installs.DEPLOY, capture_output=True, text=True, timeout=600,
            env={**os.environ, "PULUMI_CONFIG_PASSPHRASE": "deploy-e2e"},
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

    def in_stack() -> set[tuple[str, str, str]]:
        exported = subprocess.run(
            [str(require_tool("pulumi")), "stack", "export", "--stack", "e2e"],
            cwd=installs.DEPLOY, capture_output=True, text=True, timeout=120,
            env={**os.environ, "PULUMI_BACKEND_URL": f"file://{state}",
                 "PULUMI_CONFIG_PASSPHRASE": "deploy-e2e", "PULUMI_SKIP_UPDATE_CHECK": "true"},
        )  # fmt: skip
        assert exported.returncode == 0, exported.stderr
        resources = json.loads(exported.stdout)["deployment"].get("resources", [])
        return {
            _key(r["outputs"]) for r in resources
            if r["type"].startswith("kubernetes:") and r["type"] != CHART_COMPONENT
        }  # fmt: skip

    first = installs.objects(installs.render(tmp_path / "a", "--set", "watchNamespaces=[team-a]"))
    pulumi("up", "team-a")
    assert in_stack() == {_key(obj) for obj in first}
    installs.assert_installed(cluster, first)

    second = installs.objects(installs.render(tmp_path / "b", "--set", "watchNamespaces=[team-b]"))
    pulumi("up", "team-b")
    assert in_stack() == {_key(obj) for obj in second}
    installs.assert_installed(cluster, second)
    moved = [obj for obj in first if _key(obj) not in {_key(o) for o in second}]
    assert sorted(_key(obj) for obj in moved) == [
        ("Role", "team-a", "spotpool-operator"),
        ("RoleBinding", "team-a", "spotpool-operator"),
    ]
    installs.wait_gone(cluster, moved)

    pulumi("destroy", "team-b")
    assert in_stack() == set()
    installs.wait_gone(cluster, second)


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return (obj["kind"], meta.get("namespace", ""), meta["name"])
