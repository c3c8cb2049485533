"""docs/upgrading.md's Helm step, on a real kube-apiserver with the real helm: a release made
from a chart that carried the CRD as a template (before the chart's crds/ folder) loses the CRD,
and every Spotpool with it, on `helm upgrade` to today's chart — unless the CRD is annotated
`helm.sh/resource-policy=keep` first, as the doc says; then the new CRD is applied with
`kubectl apply --server-side --force-conflicts` and `helm uninstall` keeps it.
"""

import shutil
from pathlib import Path

import pytest

from spotpool.localworld.kube import Kube
from tests.e2e._support.install_checks import CHART, CRD, article_pool, helm

pytestmark = pytest.mark.e2e

NAMESPACE = "spotpool-system"  # one a release: the chart keeps its state PVC on uninstall


def _chart_with_crd_template(directory: Path) -> Path:
    """Today's chart as the chart was before crds/: the CRD one of its templates."""
    chart = directory / "spotpool"
    shutil.rmtree(chart, ignore_errors=True)
    shutil.copytree(CHART, chart)
    for crd in (chart / "crds").glob("*.yaml"):
        crd.rename(chart / "templates" / f"crd-{crd.name}")
    (chart / "crds").rmdir()
    return chart


def _release_with_a_pool(kube: Kube, directory: Path, release: str) -> str:
    """The release installed in a namespace of its own (returned), and a pool."""
    namespace = f"{NAMESPACE}-{release}"
    kube.ok("create", "namespace", namespace)
    helm(kube, "install", release, str(_chart_with_crd_template(directory)), "-n", namespace)
    kube.ok("wait", "--for=condition=Established", f"crd/{CRD}", "--timeout=60s")
    kube.ok("apply", "-f", "-", stdin=article_pool("default"))
    return namespace


def test_the_upgrade_to_the_crds_folder_deletes_a_templated_crd_and_its_pools(
    private_cluster: Kube, tmp_path: Path
) -> None:
    namespace = _release_with_a_pool(private_cluster, tmp_path, "before")
    helm(private_cluster, "upgrade", "before", str(CHART), "-n", namespace)
    private_cluster.ok("wait", "--for=delete", f"crd/{CRD}", "--timeout=60s")
    assert private_cluster.run("get", "crd", CRD).returncode != 0
    helm(private_cluster, "uninstall", "before", "-n", namespace)


def test_the_documented_step_keeps_the_crd_and_the_pools(
    private_cluster: Kube, tmp_path: Path
) -> None:
    namespace = _release_with_a_pool(private_cluster, tmp_path, "kept")
    private_cluster.ok("annotate", "crd", CRD, "helm.sh/resource-policy=keep")
    helm(private_cluster, "upgrade", "kept", str(CHART), "-n", namespace)
    private_cluster.ok("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds"))
    assert private_cluster.ok("get", "spotpools", "-n", "default", "-o", "name").split() == [
        "spotpool.devops.jokerbai.com/spotpool-sample"
    ]
    helm(
        private_cluster, "upgrade", "kept", str(CHART), "-n", namespace, "--set", "maxConcurrent=5"
    )
    helm(private_cluster, "uninstall", "kept", "-n", namespace)
    assert private_cluster.ok("get", "crd", CRD, "-o", "name").strip().endswith(CRD)
    assert "spotpool-sample" in private_cluster.ok(
        "get", "spotpools", "-n", "default", "-o", "name"
    )
