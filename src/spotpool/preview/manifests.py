"""Find the Spotpool manifests in files and directories, and validate each one on its own."""

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from spotpool.api.spec import GROUP, KIND, VERSION, SpotpoolSpec
from spotpool.engine.stacks.disruption import DO_NOT_DISRUPT, parse_do_not_disrupt

API_VERSION = f"{GROUP}/{VERSION}"


class Manifest(BaseModel):
    file: str
    namespace: str
    name: str
    spec: SpotpoolSpec | None = None
    error: str | None = None
    do_not_disrupt: frozenset[int] = frozenset()  # the annotation's slots (disruption.py)


def find(paths: list[Path], default_namespace: str = "default") -> list[Manifest]:
    """Every Spotpool document under `paths` (YAML files, directories searched recursively)."""
    found: list[Manifest] = []
    for path in paths:
        files = sorted(path.rglob("*.y*ml")) if path.is_dir() else [path]
        for file in files:
            found += _from_file(file, default_namespace)
    return found


def _from_file(file: Path, default_namespace: str) -> list[Manifest]:
    try:
        documents = [d for d in yaml.safe_load_all(file.read_text()) if isinstance(d, dict)]
    except (OSError, yaml.YAMLError) as err:
        return [Manifest(file=str(file), namespace="", name="", error=f"unreadable: {err}")]
    return [
        _manifest(file, doc, default_namespace)
        for doc in documents
        if doc.get("kind") == KIND and doc.get("apiVersion") == API_VERSION
    ]


def _manifest(file: Path, doc: dict[str, Any], default_namespace: str) -> Manifest:
    meta = doc.get("metadata") or {}
    namespace = meta.get("namespace") or default_namespace
    name = meta.get("name") or ""
    if not name:
        return Manifest(
            file=str(file), namespace=namespace, name="", error="metadata.name is empty"
        )
    try:
        spec = SpotpoolSpec.model_validate(doc.get("spec") or {})
    except ValidationError as err:
        problems = "; ".join(
            f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" if e["loc"] else e["msg"]
            for e in err.errors()
        )
        return Manifest(file=str(file), namespace=namespace, name=name, error=problems)
    kept = parse_do_not_disrupt((meta.get("annotations") or {}).get(DO_NOT_DISRUPT))
    return Manifest(file=str(file), namespace=namespace, name=name, spec=spec, do_not_disrupt=kept)
