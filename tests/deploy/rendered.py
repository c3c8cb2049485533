"""`helm template` of the chart, as the tests look at it."""

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from spotpool_deploy import chart

Object = dict[str, Any]


def objects(values: dict[str, Any] | None = None, namespace: str = chart.NAMESPACE) -> list[Object]:
    """The objects Helm installs with `values` (no CRD: crds/, no namespace: Helm's)."""
    return chart.objects(chart.template(values or {}, namespace))


def by_identity(found: list[Object]) -> dict[str, Object]:
    return {chart.identity(obj): obj for obj in found}


def deployment(found: list[Object]) -> Object:
    (only,) = [o for o in found if o["kind"] == "Deployment"]
    return only


def pod(found: list[Object]) -> dict[str, Any]:
    spec: dict[str, Any] = deployment(found)["spec"]["template"]["spec"]
    return spec


def container(found: list[Object]) -> dict[str, Any]:
    (only,) = pod(found)["containers"]
    return dict(only)


def env(found: list[Object]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container(found)["env"] if "value" in item}


def refusal(values: dict[str, Any]) -> str:
    """What helm says when the chart's schema refuses `values`."""
    with pytest.raises(chart.ChartError) as refused:
        objects(values)
    text = str(refused.value)
    assert "values don't meet the specifications" in text, text
    return text


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


def parent_chart(tmp_path: Path) -> Path:
    """A parent chart made the way a platform team makes one, the chart under its charts/."""
    parent = tmp_path / "platform"
    shutil.copytree(chart.CHART, parent / "charts" / "spotpool")
    (parent / "Chart.yaml").write_text(PARENT)
    (parent / "values.yaml").write_text(yaml.safe_dump(PARENT_VALUES))
    return parent
