"""The chart rendered for `kubectl apply -k`: `helm template` split into one file per object
and a kustomization.yaml. The committed operator/deploy/kustomize is the chart's defaults, in
the namespace spotpool-system, with the CRD and the namespace (which Helm does not template)."""

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from spotpool_deploy import chart

KUSTOMIZATION = "kustomization.yaml"
HEADER = (
    "# Rendered from the Helm chart operator/deploy/helm/spotpool: do not edit.\n"
    "# Re-render: spotpool deploy render\n"
)
# What a kubectl install needs that a Helm release does not template.
WITHOUT_HELM = {"createNamespace": True}


class _Dumper(yaml.SafeDumper):
    """Block style, keys in the order written, no &anchors for repeated values."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    """Multi-line text (the dashboard's JSON) as a `|` block, readable in review."""
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def dump(obj: object) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)


def file_name(obj: chart.Object) -> str:
    meta = obj["metadata"]
    parts = [obj["kind"].lower(), meta.get("namespace"), meta["name"]]
    return "-".join(re.sub(r"[^a-z0-9.-]", "-", p) for p in parts if p) + ".yaml"


def render(
    values: Mapping[str, Any] | None = None, namespace: str = chart.NAMESPACE
) -> list[chart.Object]:
    """The objects of a kubectl install: the chart with `values`, its CRD and namespace."""
    merged = chart.merge_values(WITHOUT_HELM, values or {})
    return chart.objects(chart.template(merged, namespace, include_crds=True))


def files(
    values: Mapping[str, Any] | None = None, namespace: str = chart.NAMESPACE
) -> dict[str, str]:
    """File name -> text, kustomization.yaml included."""
    out: dict[str, str] = {}
    for obj in render(values, namespace):
        name = file_name(obj)
        if name in out:
            raise ValueError(f"two objects would be written to {name}")
        out[name] = HEADER + dump(obj)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": list(out),
    }
    out[KUSTOMIZATION] = HEADER + dump(kustomization)
    return out


def write(wanted: dict[str, str], directory: Path) -> list[Path]:
    """Write the files into `directory`, removing YAML files they no longer have."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.yaml"):
        if stale.name not in wanted:
            stale.unlink()
    written = []
    for name, text in wanted.items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written


def drift(wanted: dict[str, str], directory: Path) -> list[str]:
    """What differs between `directory` and `wanted`: files missing, changed or extra."""
    present = {path.name for path in directory.glob("*.yaml")} if directory.is_dir() else set()
    problems = [f"{name} is missing" for name in wanted if name not in present]
    problems += [
        f"{name} differs"
        for name in wanted
        if name in present and (directory / name).read_text() != wanted[name]
    ]
    problems += [f"{name} is not part of the install" for name in sorted(present - set(wanted))]
    return problems
