"""The install as a Helm chart, generated from the same source as the kustomization.

Every setting of `InstallConfig` is a chart value of the same camelCase name, except three
that Helm decides: `namespace` is the release's namespace, and the chart never creates it (Helm
keeps the release record in it, so it exists first: `helm install --create-namespace`); the CRD
is in crds/, which Helm installs before the templates, skips when the cluster has it already
(applied with kubectl, or another release), never upgrades and never deletes (`installCrd`:
`helm install --skip-crds`). README.md and NOTES.txt give the CRD's upgrade step.

No template is written by hand. `objects.render` runs on configs whose settings are
placeholders, and the renders become Go templates:
- a str or int setting renders as a placeholder that becomes `{{ $.Values.<name> }}`;
- a bool, optional or list setting may change the structure: the objects are rendered with it
  on and off, and the two renders merged; what only one of them has is guarded by `{{ if }}`;
- a list setting's per-item objects (a Role per watched namespace) become a `{{ range }}`;
- a dict setting is written whole (`toYaml`);
- a map or list marked OMIT_EMPTY is written whole or spliced, and an optional scalar marked so
  with the entry holding it, each under `{{ if }}`/`{{ with }}` (rendered set, never off: few
  renders).
A setting of any other kind, or a placeholder used where none of this fits (a setting computed
with), stops the generator with the setting's name: extend this module, never the chart.
"""

import json
from pathlib import Path

from spotpool.api import crd
from spotpool_deploy.chart.labels import labelled
from spotpool_deploy.chart.merge import templates
from spotpool_deploy.chart.readme import CRD_FILE, NOTES, README, SCHEMA_EXTRAS
from spotpool_deploy.chart.settings import FIXED, NOT_VALUES, ChartError, Setting, settings
from spotpool_deploy.chart.values import HEADER, schema, values_for, values_yaml
from spotpool_deploy.chart.writer import doc_text
from spotpool_deploy.config import VERSION
from spotpool_deploy.kustomize import dump, files_drift

__all__ = [
    "CHART_NAME",
    "FIXED",
    "NOT_VALUES",
    "ChartError",
    "Setting",
    "drift",
    "files",
    "settings",
    "templates",
    "values_for",
    "write",
]

CHART_NAME = "spotpool"


def _chart_yaml() -> str:
    chart = {
        "apiVersion": "v2",
        "name": CHART_NAME,
        "description": "The Spotpool operator: pools of Tencent Cloud spot instances kept at "
        "their declared size, one Pulumi stack per pool.",
        "type": "application",
        "version": VERSION,
        "appVersion": VERSION,
        "kubeVersion": ">=1.30.0-0",
        "keywords": ["spot", "tencentcloud", "pulumi", "operator"],
    }
    return HEADER + dump(chart)


def files() -> dict[str, str]:
    """Path inside the chart -> text."""
    by_file: dict[str, list[str]] = {}
    for doc in templates():
        by_file.setdefault(doc.file, []).append(doc_text(labelled(doc)))
    values_schema = schema()
    values_schema["properties"].update(SCHEMA_EXTRAS)
    out = {
        "Chart.yaml": _chart_yaml(),
        "README.md": README,
        "values.yaml": values_yaml(),
        "values.schema.json": json.dumps(values_schema, indent=2) + "\n",
        CRD_FILE: crd.render_yaml(),  # the spec model's CRD, as crds/ at the top has it
        "templates/NOTES.txt": NOTES,
    }
    for name, texts in by_file.items():
        out[f"templates/{name}"] = HEADER + "".join(texts)
    return out


def write(directory: Path) -> list[Path]:
    """Write the chart into `directory`, removing files it no longer has."""
    wanted = files()
    for stale in (p for p in directory.rglob("*") if p.is_file()):
        if str(stale.relative_to(directory)) not in wanted:
            stale.unlink()
    written = []
    for name, text in wanted.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def drift(directory: Path) -> list[str]:
    """What differs between `directory` and the chart: files missing, changed or extra."""
    wanted = files()
    present = (
        {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}
        if directory.is_dir()
        else set()
    )
    return files_drift(wanted, present, directory, "the chart")
