"""The install as plain YAML for `kubectl apply -k`: one file per object and a kustomization."""

import re
from pathlib import Path

import yaml

from spotpool_deploy.config import InstallConfig
from spotpool_deploy.objects import Object, render

KUSTOMIZATION = "kustomization.yaml"
HEADER = (
    "# Generated from operator/deploy/spotpool_deploy: do not edit.\n"
    "# Regenerate: cd operator/deploy && python -m spotpool_deploy render --out kustomize\n"
)


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


def file_name(obj: Object) -> str:
    meta = obj["metadata"]
    parts = [obj["kind"].lower(), meta.get("namespace"), meta["name"]]
    return "-".join(re.sub(r"[^a-z0-9.-]", "-", p) for p in parts if p) + ".yaml"


def files(config: InstallConfig) -> dict[str, str]:
    """File name -> text, kustomization.yaml included."""
    out: dict[str, str] = {}
    for obj in render(config):
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


def write(config: InstallConfig, directory: Path) -> list[Path]:
    """Write the install into `directory`, removing YAML files it no longer has."""
    wanted = files(config)
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


def drift(config: InstallConfig, directory: Path) -> list[str]:
    """What differs between `directory` and the install: files missing, changed or extra."""
    present = {path.name for path in directory.glob("*.yaml")} if directory.is_dir() else set()
    return files_drift(files(config), present, directory, "the install")


def files_drift(
    wanted: dict[str, str], present: set[str], directory: Path, whole: str
) -> list[str]:
    """`wanted` (name -> text) against the `present` files of `directory`: what is missing,
    changed, or not part of `whole`."""
    problems = [f"{name} is missing" for name in wanted if name not in present]
    problems += [
        f"{name} differs"
        for name in wanted
        if name in present and (directory / name).read_text() != wanted[name]
    ]
    problems += [f"{name} is not part of {whole}" for name in sorted(present - set(wanted))]
    return problems
