"""`helm template` of the chart, as the tests look at it."""

from typing import Any

import pytest
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
