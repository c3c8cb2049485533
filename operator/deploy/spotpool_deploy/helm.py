"""The install as a Helm chart, generated from the same source as the kustomization.

Every setting of `InstallConfig` is a chart value of the same camelCase name, except two that
Helm decides: `namespace` is the release's namespace, and the chart never creates it (Helm keeps
the release record in it, so it exists first: `helm install --create-namespace`).

No template is written by hand. `objects.render` runs on configs whose settings are
placeholders, and the renders become Go templates:
- a str or int setting renders as a placeholder that becomes `{{ $.Values.<name> }}`;
- a bool, optional or list setting may change the structure: the objects are rendered with it
  on and off, and the two renders merged; what only one of them has is guarded by `{{ if }}`;
- a list setting's per-item objects (a Role per watched namespace) become a `{{ range }}`;
- a dict setting is written whole (`toYaml`).
A setting of any other kind, or a placeholder used where none of this fits (a setting computed
with), stops the generator with the setting's name: extend this module, never the chart.
"""

import json
from pathlib import Path

from spotpool_deploy.chart.merge import templates
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


NOTES = """\
Spotpool operator {{ .Chart.AppVersion }} installed in {{ .Release.Namespace }}.
{{- if .Values.watchNamespaces }}
It serves the Spotpools of: {{ join ", " .Values.watchNamespaces }}.
{{- else }}
It serves the Spotpools of every namespace.
{{- end }}

The pod waits for the stacks' passphrase Secret. Create it once, and keep a copy
(it decrypts the state):

  kubectl -n {{ .Release.Namespace }} create secret generic {{ .Values.passphraseSecret.name }} \\
      --from-literal={{ .Values.passphraseSecret.key }}="$(openssl rand -base64 32)"
"""


def files() -> dict[str, str]:
    """Path inside the chart -> text."""
    by_file: dict[str, list[str]] = {}
    for doc in templates():
        by_file.setdefault(doc.file, []).append(doc_text(doc))
    out = {
        "Chart.yaml": _chart_yaml(),
        "values.yaml": values_yaml(),
        "values.schema.json": json.dumps(schema(), indent=2) + "\n",
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
