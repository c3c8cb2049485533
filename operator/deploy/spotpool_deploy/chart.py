"""The Helm chart, as the other install forms use it: its values, and `helm template` of it.

The chart is the install's one source (operator/deploy/helm/spotpool: hand-written templates,
values.yaml documents each value). This module runs the pinned helm on it; nothing here
describes an object.
"""

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[1] / "helm" / "spotpool"
RELEASE = "spotpool"  # the release name: no object's name depends on it
NAMESPACE = "spotpool-system"
Object = dict[str, Any]


class ChartError(Exception):
    """helm refused the values (the schema names the value) or is missing."""


def helm_binary() -> Path:
    """The pinned helm of the toolchain (`spotpool toolchain install helm`), else one on PATH."""
    from spotpool.toolchain.install import status
    from spotpool.toolchain.manifest import TOOLS_BY_NAME

    pinned = status(TOOLS_BY_NAME["helm"])
    if pinned.ok:
        return pinned.path
    found = shutil.which("helm")
    if found is None:
        detail = pinned.detail
        raise ChartError(f"no helm: run `spotpool toolchain install helm` (helm is {detail})")
    return Path(found)


def merge_values(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Values files merged as Helm merges them: maps key by key, anything else replaced (a null
    stays, and drops the chart's default of that key)."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
                merged[key] = merge_values(merged[key], value)
            else:
                merged[key] = value
    return merged


def set_value(values: dict[str, Any], assignment: str) -> dict[str, Any]:
    """`a.b=YAML`: the value at a dotted path, read as YAML (`3`, `true`, `[team-a, team-b]`)."""
    path, sep, text = assignment.partition("=")
    if not sep or not path:
        raise ChartError(f"{assignment!r}: give PATH=VALUE, e.g. watchNamespaces=[team-a]")
    value: Any = yaml.safe_load(text) if text else ""
    for key in reversed(path.split(".")):
        value = {key: value}
    return merge_values(values, value)


def values_from(files: Iterable[Path] = (), assignments: Iterable[str] = ()) -> dict[str, Any]:
    """Values from YAML files, then `PATH=VALUE` assignments, each over the ones before."""
    values: dict[str, Any] = {}
    for file in files:
        loaded = yaml.safe_load(file.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ChartError(f"{file}: a values file is a YAML map")
        values = merge_values(values, loaded)
    for assignment in assignments:
        values = set_value(values, assignment)
    return values


def template(
    values: Mapping[str, Any] | None = None,
    namespace: str = NAMESPACE,
    include_crds: bool = False,
    show_only: str | None = None,
) -> str:
    """`helm template` of the chart with `values` (validated by values.schema.json)."""
    with tempfile.TemporaryDirectory(prefix="spotpool-chart-") as scratch:
        file = Path(scratch) / "values.json"
        file.write_text(json.dumps(dict(values or {})))
        command = [str(helm_binary()), "template", RELEASE, str(CHART)]
        command += ["--namespace", namespace, "--values", str(file)]
        if include_crds:
            command.append("--include-crds")
        if show_only:
            command += ["--show-only", show_only]
        # Helm's own homes in the scratch directory: a render reads no user's Helm settings.
        env = {**os.environ, **{f"HELM_{k}_HOME": scratch for k in ("CACHE", "CONFIG", "DATA")}}
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    if done.returncode != 0:
        raise ChartError(done.stderr.strip())
    return done.stdout


def objects(text: str) -> list[Object]:
    """The objects of a multi-document render, in its order."""
    return [doc for doc in yaml.safe_load_all(text) if doc]


def identity(obj: Object) -> str:
    """kind/namespace/name (kind/name when cluster-scoped): unique within an install."""
    meta = obj["metadata"]
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj['kind']}/{where}{meta['name']}"
