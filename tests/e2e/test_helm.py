"""The Helm chart with the real helm on a real kube-apiserver (with its controller manager):
lint, install, upgrade and uninstall; the chart's service account may do what the operator does
and nothing more, in both RBAC scopes; the operator runs on nothing but that account.

A cluster of its own, as test_deploy.py: the CRD comes and goes with the tests' installs. The
chart keeps it in crds/: Helm installs it unless the cluster has it, and never deletes it.
"""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from spotpool_deploy.chart import identity

from spotpool.localworld.kube import Kube
from tests.conftest import require_tool
from tests.deploy.rendered import parent_chart
from tests.e2e import installs
from tests.e2e._support.install_checks import (
    ACCESS,
    CHART,
    CRD,
    CRDS,
    INTERRUPTIONS,
    LEASES,
    NAMESPACES,
    NODE_RIGHTS,
    POOLS,
    article_pool,
    helm,
    namespaces,
    nothing_more,
    operator_serves_only_team_a,
    pod_is_admitted,
)
from tests.emulator.harness import start_emulator

pytestmark = pytest.mark.e2e

RELEASE = "spotpool"
REPOSITORY_CRDS = Path(__file__).resolve().parents[2] / "crds"
SAMPLE = Path("/work/shared/reference/article-sample.yaml")


def _docs(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _restricted_namespace(kube: Kube, name: str) -> None:
    """The release's namespace, made before the release (Helm keeps the release in it), with
    the `restricted` Pod Security Standard the operator's pod meets."""
    kube.ok("create", "namespace", name)
    kube.ok("label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted")


def test_helm_installs_where_the_crd_was_applied_first_and_keeps_it(
    private_cluster: Kube, tmp_path: Path
) -> None:
    """As the article's `make install` leaves a cluster: the CRD applied with kubectl. The chart
    installs there (Helm skips a crds/ CRD the cluster has), a changed CRD reaches the cluster
    by the documented step, and uninstalling keeps the CRD and the pools."""
    assert private_cluster.run("get", "crd", CRD).returncode != 0  # the cluster's first test
    private_cluster.ok("apply", "-f", str(REPOSITORY_CRDS))
    private_cluster.ok("wait", "--for=condition=Established", f"crd/{CRD}", "--timeout=30s")
    _restricted_namespace(private_cluster, "crd-first")
    release = ["--namespace", "crd-first"]

    helm(private_cluster, "install", RELEASE, str(CHART), *release)
    manifest = _docs(helm(private_cluster, "get", "manifest", RELEASE, *release))
    assert "CustomResourceDefinition" not in {o["kind"] for o in manifest}
    installs.assert_installed(private_cluster, manifest)
    for obj in manifest:  # Helm's labels on every object, the version from the chart
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm", identity(obj)
        assert labels["helm.sh/chart"] == "spotpool-0.1.0", identity(obj)
        assert labels["app.kubernetes.io/version"] == "0.1.0", identity(obj)
    private_cluster.ok("apply", "-f", "-", stdin=article_pool("crd-first"))

    # A chart whose CRD changed (here: one more printer column) reaches the cluster by the
    # step README.md and NOTES.txt give, before `helm upgrade`.
    changed = yaml.safe_load((CHART / "crds" / "devops.jokerbai.com_spotpools.yaml").read_text())
    columns = changed["spec"]["versions"][0]["additionalPrinterColumns"]
    columns.append({"name": "Upgraded", "type": "string", "jsonPath": ".spec.region"})
    (tmp_path / "crds").mkdir()
    (tmp_path / "crds" / "spotpools.yaml").write_text(yaml.safe_dump(changed))
    private_cluster.ok("apply", "--server-side", "--force-conflicts", "-f", str(tmp_path / "crds"))
    live = json.loads(private_cluster.ok("get", "crd", CRD, "-o", "json"))
    assert live["spec"]["versions"][0]["additionalPrinterColumns"][-1]["name"] == "Upgraded"
    helm(private_cluster, "upgrade", RELEASE, str(CHART), *release, "--set", "fullRefreshEvery=5")
    (deployment,) = [
        o for o in _docs(helm(private_cluster, "get", "manifest", RELEASE, *release))
        if o["kind"] == "Deployment"
    ]  # fmt: skip
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert {"name": "SPOTPOOL_FULL_REFRESH_EVERY", "value": "5"} in container["env"]
    installs.assert_installed(private_cluster, [deployment])

    helm(private_cluster, "uninstall", RELEASE, *release, "--wait", "--timeout", "2m")
    installs.wait_gone(private_cluster, manifest)
    assert private_cluster.run("get", "crd", CRD).returncode == 0
    assert private_cluster.run("-n", "crd-first", "get", POOLS, "spotpool-sample").returncode == 0
    private_cluster.ok("-n", "crd-first", "delete", POOLS, "spotpool-sample", "--wait=false")
    # Back to the chart's own CRD for the tests below (a copy that differs is no one's).
    private_cluster.ok("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds"))


def test_helm_installs_upgrades_and_uninstalls_with_least_privilege(private_cluster: Kube) -> None:
    assert "0 chart(s) failed" in helm(private_cluster, "lint", "--strict", str(CHART))
    _restricted_namespace(private_cluster, "spotpool-system")
    namespaces(private_cluster, "team-a", "team-b", "other")
    release = ["--namespace", "spotpool-system"]

    # Install: every namespace (the default scope).
    helm(private_cluster, "install", RELEASE, str(CHART), *release)
    wanted = _docs(helm(private_cluster, "get", "manifest", RELEASE, *release))
    assert wanted == _docs(helm(private_cluster, "template", RELEASE, str(CHART), *release))
    installs.assert_installed(private_cluster, wanted)
    (deployment,) = [o for o in wanted if o["kind"] == "Deployment"]
    pod_is_admitted(private_cluster, deployment)
    account = "system:serviceaccount:spotpool-system:spotpool-operator"
    for where in (["-n", "team-a"], ["-n", "default"], ["--all-namespaces"]):
        for verb in ("get", "list", "watch", "patch"):
            assert installs.can(private_cluster, account, verb, POOLS, *where), (verb, where)
        assert installs.can(private_cluster, account, "get", "secrets", *where)
    nothing_more(private_cluster, account, "team-a", set())
    for verb in ("get", "create", "update"):
        assert installs.can(private_cluster, account, verb, LEASES, "-n", "spotpool-system"), verb
    assert not installs.can(private_cluster, account, "get", LEASES, "--all-namespaces")

    # Upgrade: only team-a and team-b. The cluster-wide pool rights go, Roles come.
    scoped = ["--set", "watchNamespaces={team-a,team-b}"]
    helm(private_cluster, "upgrade", RELEASE, str(CHART), *release, *scoped)
    upgraded = _docs(helm(private_cluster, "get", "manifest", RELEASE, *release))
    installs.assert_installed(private_cluster, upgraded)
    kept = {identity(o) for o in upgraded}
    installs.wait_gone(private_cluster, [o for o in wanted if identity(o) not in kept])
    assert [o["metadata"]["namespace"] for o in upgraded if o["kind"] == "Role"] == [
        "spotpool-system", "team-a", "team-b",
    ]  # fmt: skip
    (lease_role,) = [
        o for o in upgraded if o["kind"] == "Role" and "lease" in o["metadata"]["name"]
    ]
    lease_verbs = " ".join(lease_role["rules"][0]["verbs"])
    for ns in ("team-a", "team-b"):
        nothing_more(private_cluster, account, ns, {NAMESPACES})
    for ns in ("other", "default", "spotpool-system"):
        for verb, resource in (("get", "secrets"), ("list", POOLS), ("create", "events")):
            assert not installs.can(private_cluster, account, verb, resource, "-n", ns), (verb, ns)
        lease = {(LEASES, lease_verbs), *INTERRUPTIONS} if ns == "spotpool-system" else set()
        assert installs.granted(private_cluster, account, ns) == {
            (CRDS, "get list watch"), NAMESPACES, *ACCESS, *NODE_RIGHTS, *lease,
        }  # fmt: skip
    assert not installs.can(private_cluster, account, "get", "secrets", "--all-namespaces")
    history = json.loads(helm(private_cluster, "history", RELEASE, *release, "-o", "json"))
    assert [(h["revision"], h["status"]) for h in history] == [(1, "superseded"), (2, "deployed")]

    # Uninstall: everything the release made goes but the CRD (crds/); the namespaces stay.
    helm(private_cluster, "uninstall", RELEASE, *release, "--wait", "--timeout", "2m")
    installs.wait_gone(private_cluster, upgraded)
    assert private_cluster.run("get", "crd", CRD).returncode == 0
    assert private_cluster.run("get", "namespace", "team-a").returncode == 0
    assert helm(private_cluster, "list", *release, "-q").strip() == ""


def test_a_platform_that_assigns_its_own_uid_installs_with_the_uid_dropped(
    private_cluster: Kube, tmp_path: Path
) -> None:
    """OpenShift's restricted SCC gives the pod its own uid and group: the values override that
    drops them installs, and the pod still passes the `restricted` Pod Security Standard."""
    _restricted_namespace(private_cluster, "assigned-uid")
    release = ["--namespace", "assigned-uid"]
    values = tmp_path / "values.yaml"
    values.write_text(
        "podSecurityContext: {runAsUser: null, runAsGroup: null, fsGroup: null}\n"
        "fullnameOverride: ops\n"
    )
    helm(private_cluster, "install", RELEASE, str(CHART), *release, "--values", str(values))
    installed = _docs(helm(private_cluster, "get", "manifest", RELEASE, *release))
    installs.assert_installed(private_cluster, installed)
    (deployment,) = [o for o in installed if o["kind"] == "Deployment"]
    assert deployment["metadata"]["name"] == "ops"
    context = deployment["spec"]["template"]["spec"]["securityContext"]
    assert not {"runAsUser", "runAsGroup", "fsGroup"} & set(context)
    assert context["runAsNonRoot"] is True
    pod_is_admitted(private_cluster, deployment)
    helm(private_cluster, "uninstall", RELEASE, *release, "--wait", "--timeout", "2m")
    installs.wait_gone(private_cluster, installed)


def test_the_operator_runs_on_nothing_but_the_charts_service_account(
    private_cluster: Kube, tmp_path: Path
) -> None:
    """The operator as its pod would run it (pod.py) from the Deployment Helm installed,
    authenticated with a token of the chart's service account, converges a pool in the
    namespace it serves and leaves the other namespace's pool alone."""
    require_tool("pulumi")
    require_tool("pulumi-resource-tencentcloud")
    emulator = start_emulator(tmp_path / "cloud.db", tmp_path / "emulator.log", boot_seconds=1)
    release = ["--namespace", "pools-system"]
    _restricted_namespace(private_cluster, "pools-system")
    namespaces(private_cluster, "team-a", "other")
    values = tmp_path / "values.yaml"
    values.write_text(f"watchNamespaces: [team-a]\ncloudEndpoint: {emulator.endpoint}\n")
    try:
        helm(private_cluster, "install", RELEASE, str(CHART), *release, "--values", str(values))
        installed = _docs(helm(private_cluster, "get", "manifest", RELEASE, *release))
        (deployment,) = [o for o in installed if o["kind"] == "Deployment"]
        operator_serves_only_team_a(
            private_cluster, deployment, "pools-system", tmp_path, "helm-e2e-passphrase"
        )
    finally:
        emulator.stop()
        private_cluster.run("-n", "team-a", "patch", POOLS, "gpu", "--type=merge",
                    "-p", '{"metadata":{"finalizers":null}}')  # fmt: skip
        helm(private_cluster, "uninstall", RELEASE, *release, "--wait", "--timeout", "2m")


def test_a_parent_chart_installs_it_as_a_subchart_with_global_values(
    private_cluster: Kube, tmp_path: Path
) -> None:
    """A platform team's umbrella chart with the chart under charts/ and `global` values: it
    installs, the objects carry the globals, and uninstalling removes them."""
    parent = parent_chart(tmp_path)
    _restricted_namespace(private_cluster, "platform")
    namespaces(private_cluster, "team-a")
    release = ["--namespace", "platform"]
    helm(private_cluster, "install", "platform", str(parent), *release)
    installed = _docs(helm(private_cluster, "get", "manifest", "platform", *release))
    installs.assert_installed(private_cluster, installed)
    (deployment,) = [o for o in installed if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "reg.example/spotpool-operator:0.1.0"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert [(o["metadata"]["namespace"]) for o in installed if o["kind"] == "Role"] == [
        "platform", "team-a",
    ]  # fmt: skip
    helm(private_cluster, "uninstall", "platform", *release, "--wait", "--timeout", "2m")
    installs.wait_gone(private_cluster, installed)
    assert private_cluster.run("get", "crd", CRD).returncode == 0
