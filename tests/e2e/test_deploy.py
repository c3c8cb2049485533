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
from pathlib import Path
from typing import Any

import pytest

from spotpool.localworld.kube import Kube
from tests.conftest import require_tool
from tests.e2e import installs
from tests.e2e._support.install_checks import (
    ACCESS,
    CRDS,
    INTERRUPTIONS,
    LEASES,
    NAMESPACES,
    NODE_RIGHTS,
    POOLS,
    namespaces,
    nothing_more,
    operator_serves_only_team_a,
    pod_is_admitted,
)
from tests.emulator.harness import start_emulator

pytestmark = pytest.mark.e2e

CHART_COMPONENT = "kubernetes:helm.sh/v4:Chart"  # the Pulumi program's one resource of its own


def _delete(kube: Kube, directory: Path) -> None:
    wanted = installs.objects(directory)
    kube.ok("delete", "-k", str(directory), "--wait=false")
    installs.wait_gone(kube, wanted)


def test_the_kustomization_installs_everything_as_configured_and_deletes_cleanly(
    private_cluster: Kube,
) -> None:
    wanted = installs.objects(installs.KUSTOMIZE)
    kinds = [obj["kind"] for obj in wanted]
    assert kinds.count("ClusterRole") == 3 and "Deployment" in kinds
    roles = [
        (o["metadata"]["namespace"], o["metadata"]["name"]) for o in wanted if o["kind"] == "Role"
    ]
    assert roles == [("spotpool-system", "spotpool-operator-lease")]  # the Lease alone

    private_cluster.ok("apply", "-k", str(installs.KUSTOMIZE))
    private_cluster.ok("wait", "--for=condition=Established", f"crd/{POOLS}", "--timeout=30s")
    installs.assert_installed(private_cluster, wanted)
    _admitted_as_restricted(private_cluster, wanted)

    account = "system:serviceaccount:spotpool-system:spotpool-operator"
    namespaces(private_cluster, "team-a")
    for where in (["-n", "team-a"], ["-n", "default"], ["--all-namespaces"]):
        for verb in ("get", "list", "watch", "patch"):
            assert installs.can(private_cluster, account, verb, POOLS, *where), (verb, where)
        assert installs.can(
            private_cluster, account, "patch", POOLS, "--subresource=status", *where
        )
        assert installs.can(private_cluster, account, "create", "events", *where)
        assert installs.can(private_cluster, account, "get", "secrets", *where)
    for verb in ("get", "list", "watch"):
        assert installs.can(private_cluster, account, verb, CRDS)
    nothing_more(private_cluster, account, "team-a", set())
    assert not installs.can(
        private_cluster, account, "list", "namespaces"
    )  # kopf: not cluster-wide
    for verb in ("get", "list", "create", "update", "delete"):  # shard and member Leases,
        assert installs.can(private_cluster, account, verb, LEASES, "-n", "spotpool-system"), verb
    assert not installs.can(private_cluster, account, "patch", LEASES, "-n", "spotpool-system")
    assert not installs.can(private_cluster, account, "list", LEASES, "-n", "team-a")  # its ns only
    assert not installs.can(private_cluster, account, "get", LEASES, "--all-namespaces")

    _delete(private_cluster, installs.KUSTOMIZE)
    assert private_cluster.run("get", "crd", POOLS).returncode != 0


def _admitted_as_restricted(kube: Kube, wanted: list[dict[str, Any]]) -> None:
    """The install's namespace enforces `restricted` Pod Security, and its Deployment's pod
    passes it."""
    (namespace,) = [o for o in wanted if o["kind"] == "Namespace"]
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    (deployment,) = [o for o in wanted if o["kind"] == "Deployment"]
    pod_is_admitted(kube, deployment)


def test_an_install_for_some_namespaces_grants_rights_only_there(
    private_cluster: Kube, tmp_path: Path
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
    namespaces(private_cluster, "team-a", "team-b", "other")
    private_cluster.ok("apply", "-k", str(directory))
    installs.assert_installed(private_cluster, wanted)

    account = "system:serviceaccount:pools-system:spotpool-operator"
    for ns in ("team-a", "team-b"):
        for verb in ("get", "list", "watch", "patch"):
            assert installs.can(private_cluster, account, verb, POOLS, "-n", ns)
        assert installs.can(
            private_cluster, account, "patch", POOLS, "--subresource=status", "-n", ns
        )
        assert installs.can(private_cluster, account, "create", "events", "-n", ns)
        assert installs.can(private_cluster, account, "get", "secrets", "-n", ns)
        nothing_more(private_cluster, account, ns, {NAMESPACES})
    for ns in ("other", "default", "kube-system", "pools-system"):  # its own namespace too
        for verb, resource in (("get", "secrets"), ("list", POOLS), ("create", "events")):
            assert not installs.can(private_cluster, account, verb, resource, "-n", ns), (verb, ns)
        lease = (
            {(LEASES, "get list create update delete"), *INTERRUPTIONS}
            if ns == "pools-system"
            else set()
        )
        assert installs.granted(private_cluster, account, ns) == {
            (CRDS, "get list watch"), NAMESPACES, *ACCESS, *NODE_RIGHTS, *lease,
        }  # fmt: skip
    assert not installs.can(private_cluster, account, "list", POOLS, "--all-namespaces")
    assert not installs.can(private_cluster, account, "get", "secrets", "--all-namespaces")

    _delete(private_cluster, directory)
    assert private_cluster.run("get", "namespace", "team-a").returncode == 0  # not the install's


def test_the_operator_runs_with_nothing_but_its_accounts_rights(
    private_cluster: Kube, tmp_path: Path
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
    namespaces(private_cluster, "team-a", "other")
    private_cluster.ok("apply", "-k", str(directory))
    try:
        operator_serves_only_team_a(
            private_cluster, deployment, "spotpool-system", tmp_path, "install-e2e-passphrase"
        )
    finally:
        emulator.stop()
        private_cluster.run("-n", "team-a", "patch", POOLS, "gpu", "--type=merge",
                    "-p", '{"metadata":{"finalizers":null}}')  # fmt: skip
        _delete(private_cluster, directory)


def test_the_deploy_program_creates_what_the_kustomization_does_updates_and_destroys(
    private_cluster: Kube, tmp_path: Path
) -> None:
    """The three install forms are one: the Pulumi program (the chart through helm.v4.Chart,
    inline through the Automation API) creates exactly the objects of the kustomization
    rendered with the same values, each as configured (and the committed kustomization is the
    chart's defaults: tests/deploy/test_kustomize.py; Helm's own install: test_helm.py). An
    `up` with other values moves the Role to the newly watched namespace; `destroy` removes it
    all (foreground deletion: the controller manager's garbage collector)."""
    require_tool("pulumi")
    require_tool("pulumi-resource-kubernetes")
    namespaces(private_cluster, "team-a", "team-b")
    state = tmp_path / "state"

    def pulumi(operation: str, watch: str) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "spotpool_deploy", "run", operation, "--stack", "e2e",
             "--state", f"file://{state}", "--kubeconfig", str(private_cluster.kubeconfig),
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
    installs.assert_installed(private_cluster, first)

    second = installs.objects(installs.render(tmp_path / "b", "--set", "watchNamespaces=[team-b]"))
    pulumi("up", "team-b")
    assert in_stack() == {_key(obj) for obj in second}
    installs.assert_installed(private_cluster, second)
    moved = [obj for obj in first if _key(obj) not in {_key(o) for o in second}]
    assert sorted(_key(obj) for obj in moved) == [
        ("Role", "team-a", "spotpool-operator"),
        ("RoleBinding", "team-a", "spotpool-operator"),
    ]
    installs.wait_gone(private_cluster, moved)

    pulumi("destroy", "team-b")
    assert in_stack() == set()
    installs.wait_gone(private_cluster, second)


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return (obj["kind"], meta.get("namespace", ""), meta["name"])
