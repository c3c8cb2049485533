"""The committed kustomization is what the install source gives, and `render` keeps it so."""

from pathlib import Path

import yaml
from spotpool_deploy import kustomize
from spotpool_deploy.cli import app
from spotpool_deploy.config import InstallConfig
from spotpool_deploy.objects import render
from typer.testing import CliRunner

COMMITTED = Path(__file__).resolve().parents[2] / "operator" / "deploy" / "kustomize"


def test_the_committed_yaml_has_not_drifted_from_the_source() -> None:
    assert kustomize.drift(InstallConfig(), COMMITTED) == [], (
        "operator/deploy/kustomize is stale: cd operator/deploy && python -m spotpool_deploy render"
    )


def test_the_kustomization_lists_every_object_once_in_apply_order(tmp_path: Path) -> None:
    config = InstallConfig(watch_namespaces=["team-a"], backend_url="s3://state")
    kustomize.write(config, tmp_path)
    listed = yaml.safe_load((tmp_path / kustomize.KUSTOMIZATION).read_text())["resources"]
    loaded = [yaml.safe_load((tmp_path / name).read_text()) for name in listed]
    assert loaded == render(config)
    assert "&id" not in "".join(p.read_text() for p in tmp_path.iterdir())  # no YAML anchors


def test_render_writes_checks_and_removes_what_the_install_no_longer_has(tmp_path: Path) -> None:
    runner = CliRunner()
    out = ["--out", str(tmp_path)]
    result = runner.invoke(app, ["render", *out, "--watch-namespace", "team-a"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "role-team-a-spotpool-operator.yaml").exists()
    assert (
        runner.invoke(app, ["render", *out, "--check", "--watch-namespace", "team-a"]).exit_code
        == 0
    )

    drifted = runner.invoke(app, ["render", *out, "--check"])
    assert drifted.exit_code == 1
    assert "role-team-a-spotpool-operator.yaml is not part of the install" in drifted.output

    assert runner.invoke(app, ["render", *out]).exit_code == 0
    assert not (tmp_path / "role-team-a-spotpool-operator.yaml").exists()
    assert kustomize.drift(InstallConfig(), tmp_path) == []


def test_settings_come_from_a_file_and_flags_override_it(tmp_path: Path) -> None:
    settings = tmp_path / "install.yaml"
    settings.write_text("image: a/b:1\nmaxConcurrent: 7\nwatchNamespaces: [x]\n")
    result = CliRunner().invoke(
        app,
        ["render", "--out", str(tmp_path / "k"), "--config", str(settings), "--image", "c/d:2",
         "--full-refresh-every", "12"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    deployment = (tmp_path / "k" / "deployment-spotpool-system-spotpool-operator.yaml").read_text()
    assert "image: c/d:2" in deployment and "value: '7'" in deployment
    assert "- name: SPOTPOOL_FULL_REFRESH_EVERY\n          value: '12'" in deployment
    assert (tmp_path / "k" / "role-x-spotpool-operator.yaml").exists()
    bad = CliRunner().invoke(app, ["render", "--out", str(tmp_path), "--namespace", "Bad_Name"])
    assert bad.exit_code == 2 and "not a Kubernetes name" in bad.output
