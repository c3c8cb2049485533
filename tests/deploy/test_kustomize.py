"""The committed kustomization is the chart rendered with its defaults, and `spotpool deploy
render` keeps it so (the real helm)."""

from pathlib import Path

import pytest
import yaml
from spotpool_deploy import chart, kustomize
from spotpool_deploy.cli import app
from typer.testing import CliRunner

from spotpool.api import crd

pytestmark = pytest.mark.unit

COMMITTED = chart.CHART.parents[1] / "kustomize"


def test_the_committed_kustomization_is_the_chart_with_its_defaults() -> None:
    assert kustomize.drift(kustomize.files(), COMMITTED) == [], (
        "operator/deploy/kustomize is stale: spotpool deploy render"
    )


def test_the_kustomization_is_helm_template_with_the_crd_and_the_namespace() -> None:
    listed = yaml.safe_load((COMMITTED / kustomize.KUSTOMIZATION).read_text())["resources"]
    loaded = [yaml.safe_load((COMMITTED / name).read_text()) for name in listed]
    helm = chart.objects(chart.template({}, "spotpool-system"))
    kinds = [obj["kind"] for obj in loaded]
    assert kinds[:2] == ["CustomResourceDefinition"] * 2 and "Namespace" in kinds
    assert "NetworkPolicy" in kinds  # on by default (issue 46)
    crds = [yaml.safe_load(crd.render_yaml()), yaml.safe_load(crd.render_access_yaml())]
    assert sorted(loaded[:2], key=str) == sorted(crds, key=str)  # the chart's crds/
    (namespace,) = [obj for obj in loaded if obj["kind"] == "Namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert [o for o in loaded if o["kind"] not in ("CustomResourceDefinition", "Namespace")] == helm
    assert "&id" not in "".join(p.read_text() for p in COMMITTED.iterdir())  # no YAML anchors


def test_render_writes_checks_and_removes_what_the_install_no_longer_has(tmp_path: Path) -> None:
    runner = CliRunner()
    out = ["--out", str(tmp_path)]
    result = runner.invoke(app, ["render", *out, "--set", "watchNamespaces=[team-a]"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "role-team-a-spotpool-operator.yaml").exists()
    again = runner.invoke(app, ["render", *out, "--check", "--set", "watchNamespaces=[team-a]"])
    assert again.exit_code == 0, again.output

    drifted = runner.invoke(app, ["render", *out, "--check"])
    assert drifted.exit_code == 1
    assert "role-team-a-spotpool-operator.yaml is not part of the install" in drifted.output

    assert runner.invoke(app, ["render", *out]).exit_code == 0
    assert not (tmp_path / "role-team-a-spotpool-operator.yaml").exists()
    assert kustomize.drift(kustomize.files(), tmp_path) == []


def test_values_come_from_files_then_set_and_bad_ones_are_named(tmp_path: Path) -> None:
    settings = tmp_path / "values.yaml"
    settings.write_text(
        "image: {repository: a/b, tag: '1'}\nmaxConcurrent: 7\nwatchNamespaces: [x]\n"
    )
    result = CliRunner().invoke(
        app,
        ["render", "--out", str(tmp_path / "k"), "--values", str(settings),
         "--set", "image.tag=2", "--set", "fullRefreshEvery=12", "--namespace", "ops"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    deployment = (tmp_path / "k" / "deployment-ops-spotpool-operator.yaml").read_text()
    assert "image: a/b:2" in deployment and "value: '7'" in deployment
    assert "- name: SPOTPOOL_FULL_REFRESH_EVERY\n          value: '12'" in deployment
    assert (tmp_path / "k" / "role-x-spotpool-operator.yaml").exists()
    bad = CliRunner().invoke(app, ["render", "--out", str(tmp_path), "--set", "replicas=0"])
    assert bad.exit_code == 2 and "replicas" in bad.output
    bad = CliRunner().invoke(app, ["render", "--out", str(tmp_path), "--set", "replicas"])
    assert bad.exit_code == 2 and "PATH=VALUE" in bad.output


def test_values_merge_as_helm_merges_them() -> None:
    merged = chart.values_from(
        assignments=["resources.limits.memory=4Gi", "resources.requests=null", "replicas=3"]
    )
    assert merged == {"resources": {"limits": {"memory": "4Gi"}, "requests": None}, "replicas": 3}
    assert chart.merge_values({"a": {"b": 1, "c": 2}}, {"a": {"c": None}}) == {
        "a": {"b": 1, "c": None}
    }
