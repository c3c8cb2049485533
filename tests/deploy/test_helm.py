"""The committed Helm chart is what the install source gives, and `helm template` of it gives
exactly the objects `render` gives for the same settings (the real helm, no cluster)."""

import json
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError
from spotpool_deploy import helm
from spotpool_deploy.cli import app
from spotpool_deploy.config import InstallConfig
from spotpool_deploy.objects import identity, render
from typer.testing import CliRunner

from tests.conftest import require_tool

COMMITTED = Path(__file__).resolve().parents[2] / "operator" / "deploy" / "helm" / "spotpool"


def test_the_committed_chart_has_not_drifted_from_the_source() -> None:
    assert helm.drift(COMMITTED) == [], (
        "operator/deploy/helm/spotpool is stale: spotpool deploy render"
    )


def test_render_writes_and_checks_the_chart(tmp_path: Path) -> None:
    runner = CliRunner()
    out = ["--out", str(tmp_path / "k"), "--chart", str(tmp_path / "chart")]
    assert runner.invoke(app, ["render", *out]).exit_code == 0
    assert helm.drift(tmp_path / "chart") == []
    (tmp_path / "chart" / "templates" / "extra.yaml").write_text("kind: Secret\n")
    (tmp_path / "chart" / "values.yaml").write_text("image: other\n")
    drifted = runner.invoke(app, ["render", *out, "--check"])
    assert drifted.exit_code == 1
    assert "values.yaml differs" in drifted.output
    assert "templates/extra.yaml is not part of the chart" in drifted.output


def test_every_setting_is_a_value_but_the_ones_helm_decides() -> None:
    values = yaml.safe_load((COMMITTED / "values.yaml").read_text())
    expected = InstallConfig().model_dump(by_alias=True, exclude={"namespace", "create_namespace"})
    assert values == expected
    schema = json.loads((COMMITTED / "values.schema.json").read_text())
    assert set(schema["properties"]) == set(expected)


def test_a_setting_the_generator_cannot_template_stops_it_by_name() -> None:
    class Odd(BaseModel):
        ratio: float = 0.5

    with pytest.raises(helm.ChartError, match="ratio"):
        helm.settings(Odd)


# Each setting away from its default at least once, and settings that interact together.
CONFIGS = {
    "defaults": InstallConfig(),
    "some namespaces, remote backend": InstallConfig(
        namespace="ops",
        name="pools",
        image="registry.example/spotpool:2",
        image_pull_policy="Always",
        watch_namespaces=["team-a", "team-b"],
        backend_url="s3://state?region=ap-singapore",
        backend_credentials_secret="state-keys",
        passphrase_secret={"name": "pp", "key": "secret"},
        cloud_endpoint="http://127.0.0.1:9000",
        max_concurrent=9,
        refresh_interval="2m",
        resources={"requests": {"cpu": "1"}, "limits": {"memory": "3Gi", "cpu": "2"}},
        metrics={"port": 9191},
        monitoring={
            "service_monitor": True,
            "service_monitor_labels": {"release": "kube-prometheus-stack"},
            "dashboard_namespace": "monitoring",
            "dashboard_folder": "Spotpool",
            "scrape_interval": "15s",
        },
        notices={
            "enabled": True,
            "port": 8443,
            "url": "https://notices.vpc.example:8443/spotpool",
            "service_type": "LoadBalancer",
            "service_annotations": {
                "service.kubernetes.io/qcloud-loadbalancer-internal-subnetid": "subnet-1"
            },
        },
    ),
    "notices by the in-cluster name": InstallConfig(name="pools", notices={"enabled": True}),
    "file backend with a class, no extras": InstallConfig(
        install_crd=False,
        watch_namespaces=["only"],
        storage={"size": "5Gi", "storage_class_name": "fast"},
        metrics={"service": False},
        monitoring={"dashboard": False, "dashboard_labels": {"team": "ops"}},
    ),
}


def _helm_template(config: InstallConfig, tmp_path: Path) -> list[dict[str, Any]]:
    values = tmp_path / "values.json"
    values.write_text(json.dumps(helm.values_for(config)))
    out = subprocess.run(
        [str(require_tool("helm")), "template", "spotpool", str(COMMITTED),
         "--namespace", config.namespace, "--values", str(values)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_helm_template_gives_what_render_gives(name: str, tmp_path: Path) -> None:
    config = CONFIGS[name].model_copy(update={"create_namespace": False})
    rendered = {identity(obj): obj for obj in render(config)}
    templated = {identity(obj): obj for obj in _helm_template(config, tmp_path)}
    assert sorted(templated) == sorted(rendered)
    for key, obj in rendered.items():
        assert templated[key] == obj, key


def _random_configs(count: int) -> list[InstallConfig]:
    """Valid installs with every setting that changes the objects' structure drawn at random
    (the generator templates each object over the settings it depends on: this checks that it
    found them all, in combinations the hand-picked configs do not cover)."""
    structural = [s for s in helm.settings() if s.structural and s.path not in helm.FIXED]
    configs: list[InstallConfig] = []
    rng = random.Random(15)
    while len(configs) < count:
        values: dict[str, Any] = {"replicas": rng.choice([1, 3])}
        for setting in structural:
            if rng.random() < 0.5:
                continue
            on: Any = {
                "bool": not rng.random() < 0.5,
                "list": ["team-a", "team-b"][: rng.randint(1, 2)],
            }
            value = on.get(setting.kind, 9 if setting.int_inner else f"v{len(configs)}")
            target = values
            for part in setting.path[:-1]:
                target = target.setdefault(part, {})
            target[setting.path[-1]] = value
        try:
            configs.append(InstallConfig.model_validate(values))
        except ValidationError:
            continue  # a combination the model refuses (e.g. 3 replicas on a file:// backend)
    return configs


@pytest.mark.parametrize("config", _random_configs(10), ids=lambda c: "random")
def test_helm_template_gives_what_render_gives_for_random_combinations(
    config: InstallConfig, tmp_path: Path
) -> None:
    config = config.model_copy(update={"create_namespace": False})
    rendered = {identity(obj): obj for obj in render(config)}
    templated = {identity(obj): obj for obj in _helm_template(config, tmp_path)}
    assert templated == rendered


INVALID = {
    "name": {"name": "Bad_Name"},
    "watchNamespaces/0": {"watchNamespaces": ["Team-A"]},
    "watchNamespaces": {"watchNamespaces": ["a", "a"]},
    "refreshInterval": {"refreshInterval": "1 minute"},
    "scrapeInterval": {"monitoring": {"scrapeInterval": "often"}},
    "dashboardNamespace": {"monitoring": {"dashboardNamespace": "Grafana"}},
    "maxConcurrent": {"maxConcurrent": 0},
    "imagePullPolicy": {"imagePullPolicy": "Sometimes"},
    "backendUrl": {"replicas": 2},
    "backendUrl ": {"replicas": 2, "backendUrl": "file:///state"},
    "service": {"monitoring": {"serviceMonitor": True}, "metrics": {"service": False}},
    "imge": {"imge": "x"},
    "url": {"notices": {"enabled": True, "url": "10.0.3.7:8090"}},
    "serviceType": {"notices": {"serviceType": "External"}},
}


@pytest.mark.parametrize("field", list(INVALID))
def test_the_chart_refuses_what_the_install_refuses(field: str, tmp_path: Path) -> None:
    """values.schema.json carries the model's checks, the validators' included."""
    values = INVALID[field]
    with pytest.raises(ValidationError):
        InstallConfig.model_validate(values)
    file = tmp_path / "values.json"
    file.write_text(json.dumps(values))
    out = subprocess.run(
        [str(require_tool("helm")), "template", "x", str(COMMITTED), "--values", str(file)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode != 0 and "values don't meet the specifications" in out.stderr
    assert field.strip() in out.stderr, out.stderr


def test_helm_lint_passes_and_bad_values_fail_with_the_setting_named() -> None:
    binary = str(require_tool("helm"))
    lint = subprocess.run(
        [binary, "lint", "--strict", str(COMMITTED)], capture_output=True, text=True, timeout=60
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    bad = subprocess.run(
        [binary, "lint", str(COMMITTED), "--set", "watchNamespaces={Team_A}", "--set", "imge=x"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode != 0
    assert "/watchNamespaces/0" in bad.stdout and "imge" in bad.stdout, bad.stdout
