"""The committed Helm chart is what the install source gives, and `helm template` of it gives
exactly the objects `render` gives for the same settings (the real helm, no cluster)."""

import json
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError
from spotpool_deploy import helm
from spotpool_deploy.cli import app
from spotpool_deploy.config import VERSION, Image, InstallConfig
from spotpool_deploy.objects import identity, render
from typer.testing import CliRunner

from spotpool.api import crd
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
    expected = InstallConfig().model_dump(by_alias=True, exclude=helm.NOT_VALUES)
    assert values == expected
    assert {"installCrd", "createNamespace", "namespace"}.isdisjoint(values)
    schema = json.loads((COMMITTED / "values.schema.json").read_text())
    assert set(schema["properties"]) == set(expected) | {"enabled"}  # a parent's condition
    assert schema["$defs"]["Global"]["additionalProperties"] is True  # other subcharts' keys
    for flag in ("fullRefreshEvery", "probeBudget", "avoidFor", "operationTimeout", "leaseDuration",
                 "apiLimits", "installId", "maxConcurrentPerAccount", "operatorClass"):  # fmt: skip
        assert flag in values, flag
    assert values["image"] == {
        "registry": None, "repository": "spotpool-operator", "tag": "0.1.0",
        "pullPolicy": "IfNotPresent",
    }  # fmt: skip


def test_the_crd_is_in_crds_generated_from_the_spec_model_and_never_templated() -> None:
    chart = helm.files()
    assert chart["crds/devops.jokerbai.com_spotpools.yaml"] == crd.render_yaml()
    templated = "".join(text for name, text in chart.items() if name.startswith("templates/"))
    assert "CustomResourceDefinition" not in templated
    assert "helm show crds" in chart["templates/NOTES.txt"]
    assert "kubectl apply --server-side --force-conflicts" in chart["README.md"]


def test_a_setting_the_generator_cannot_template_stops_it_by_name() -> None:
    class Odd(BaseModel):
        ratio: tuple[int, int] = (1, 2)

    with pytest.raises(helm.ChartError, match="ratio"):
        helm.settings(Odd)


# Each setting away from its default at least once, and settings that interact together.
CONFIGS = {
    "defaults": InstallConfig(),
    "some namespaces, remote backend": InstallConfig(
        namespace="ops",
        name="pools",
        image=Image(repository="registry.example/spotpool", tag="2", pull_policy="Always"),
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
    "chart conventions and every operator flag": InstallConfig.model_validate(
        {
            "image": {"registry": "ccr.example", "repository": "ops/spotpool", "tag": "9"},
            "imagePullSecrets": [{"name": "regcred"}],
            "global": {"imageRegistry": "unused.example", "imagePullSecrets": [{"name": "g"}]},
            "nodeSelector": {"node-role.kubernetes.io/ops": ""},
            "tolerations": [{"key": "ops", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/arch",
                                        "operator": "In",
                                        "values": ["amd64"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
            "priorityClassName": "system-cluster-critical",
            "podAnnotations": {"example.com/scrape": "yes", "multi": "a: b"},
            "podLabels": {"team": "platform"},
            "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:x"}},
            "extraArgs": ["--history-keep=3", "--verbose"],
            "extraEnv": [
                {"name": "A", "value": "1"},
                {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            ],
            "fullRefreshEvery": 5,
            "probeBudget": 0.25,
            "avoidFor": "10m",
            "operationTimeout": "1h",
            "leaseDuration": "45s",
            "apiLimits": "RunInstances=5,DescribeInstances=20",
            "maxConcurrentPerAccount": 0,
            "installId": "prod.spotpool",
            "operatorClass": "gpu",
        }
    ),
    "global registry and pull secrets of a parent chart": InstallConfig.model_validate(
        {
            "global": {"imageRegistry": "reg.example:5000", "imagePullSecrets": [{"name": "g"}]},
            "probeBudget": 2,
        }
    ),
    "file backend with a class, no extras": InstallConfig(
        install_crd=False,
        watch_namespaces=["only"],
        storage={"size": "5Gi", "storage_class_name": "fast"},
        metrics={"service": False},
        monitoring={"dashboard": False, "dashboard_labels": {"team": "ops"}},
    ),
}


def _helm_template(config: InstallConfig, tmp_path: Path) -> list[dict[str, Any]]:
    """The objects `helm template` gives for `config`, less the labels only Helm adds (each
    object has both)."""
    values = tmp_path / "values.json"
    values.write_text(json.dumps(helm.values_for(config)))
    out = subprocess.run(
        [str(require_tool("helm")), "template", "spotpool", str(COMMITTED),
         "--namespace", config.namespace, "--values", str(values)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    objects = [doc for doc in yaml.safe_load_all(out.stdout) if doc]
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels.pop("helm.sh/chart") == f"spotpool-{VERSION}", identity(obj)
        assert labels.pop("app.kubernetes.io/managed-by") == "Helm", identity(obj)
    return objects


def _as_chart(config: InstallConfig) -> InstallConfig:
    """The chart never creates the namespace, and keeps the CRD in crds/ (not templated)."""
    return config.model_copy(update={"create_namespace": False, "install_crd": False})


@pytest.mark.parametrize("name", list(CONFIGS))
def test_helm_template_gives_what_render_gives(name: str, tmp_path: Path) -> None:
    config = _as_chart(CONFIGS[name])
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
    config = _as_chart(config)
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
    "avoidFor": {"avoidFor": "3 minutes"},
    "leaseDuration": {"leaseDuration": "30"},
    "apiLimits": {"apiLimits": "RunInstances"},
    "probeBudget": {"probeBudget": -1},
    "fullRefreshEvery": {"fullRefreshEvery": -1},
    "pullPolicy": {"image": {"pullPolicy": "Sometimes"}},
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


PARENT = """\
apiVersion: v2
name: platform
version: 1.0.0
dependencies:
  - name: spotpool
    version: 0.1.0
    repository: file://../spotpool
    condition: spotpool.enabled
"""
PARENT_VALUES: dict[str, Any] = {
    "global": {
        "imageRegistry": "reg.example",
        "imagePullSecrets": [{"name": "regcred"}],
        "storageClass": "fast",  # another subchart's global: allowed, unused
    },
    "spotpool": {"enabled": True, "watchNamespaces": ["team-a"], "fullRefreshEvery": 10},
}


def _parent_chart(tmp_path: Path) -> Path:
    """A parent chart made the way a platform team makes one, the chart under its charts/."""
    parent = tmp_path / "platform"
    shutil.copytree(COMMITTED, parent / "charts" / "spotpool")
    (parent / "Chart.yaml").write_text(PARENT)
    (parent / "values.yaml").write_text(yaml.safe_dump(PARENT_VALUES))
    return parent


def test_the_chart_works_as_a_subchart_with_global_values(tmp_path: Path) -> None:
    binary = str(require_tool("helm"))
    parent = _parent_chart(tmp_path)
    lint = subprocess.run(
        [binary, "lint", "--strict", str(parent)], capture_output=True, text=True, timeout=60
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    out = subprocess.run(
        [binary, "template", "platform", str(parent), "--namespace", "ops", "--include-crds"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    objects = [doc for doc in yaml.safe_load_all(out.stdout) if doc]
    assert [o["kind"] for o in objects].count("CustomResourceDefinition") == 1  # from crds/
    templated = {identity(o): o for o in objects if o["kind"] != "CustomResourceDefinition"}
    for obj in templated.values():
        labels = obj["metadata"]["labels"]
        assert (labels.pop("helm.sh/chart"), labels.pop("app.kubernetes.io/managed-by")) == (
            f"spotpool-{VERSION}", "Helm",
        )  # fmt: skip
    config = InstallConfig.model_validate(
        {**{k: v for k, v in PARENT_VALUES["spotpool"].items() if k != "enabled"},
         "global": PARENT_VALUES["global"], "namespace": "ops",
         "createNamespace": False, "installCrd": False}
    )  # fmt: skip
    rendered = {identity(o): o for o in render(config)}
    assert templated == rendered
    deployment = templated["Deployment/ops/spotpool-operator"]["spec"]["template"]["spec"]
    assert deployment["containers"][0]["image"] == "reg.example/spotpool-operator:0.1.0"
    assert deployment["imagePullSecrets"] == [{"name": "regcred"}]

    off = subprocess.run(
        [binary, "template", "platform", str(parent), "--set", "spotpool.enabled=false"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert off.returncode == 0 and "kind:" not in off.stdout, off.stderr
