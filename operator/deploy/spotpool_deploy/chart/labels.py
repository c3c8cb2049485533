"""Helm's own labels on every object of the chart: `helm.sh/chart` and
`app.kubernetes.io/managed-by` beside the install's labels, and `app.kubernetes.io/version`
from the chart's appVersion. The renders do not have the first two (kubectl and Pulumi installs
are not Helm's); tests compare the chart with `render` less these two."""

from dataclasses import replace
from typing import Any

from spotpool_deploy.chart.nodes import Doc, Expr, GuardedEntries, Map

VERSION_LABEL = "app.kubernetes.io/version"
HELM_LABELS = {
    "helm.sh/chart": '{{ printf "%s-%s" $.Chart.Name $.Chart.Version | replace "+" "_" | quote }}',
    "app.kubernetes.io/managed-by": "{{ $.Release.Service | quote }}",
}


def _versions(node: Any) -> Any:
    """Every version label (the pods' too) from the chart's appVersion."""
    if isinstance(node, Map):
        return Map(tuple(_versions(entry) for entry in node.entries))
    if isinstance(node, GuardedEntries):
        return replace(node, entries=_versions(node.entries))
    if isinstance(node, tuple) and node[0] == VERSION_LABEL and isinstance(node[1], str):
        return (VERSION_LABEL, Expr("{{ $.Chart.AppVersion | quote }}"))
    if isinstance(node, tuple) and isinstance(node[1], Map):
        return (node[0], _versions(node[1]))
    return node


def _with_helm_labels(metadata: Map) -> Map:
    entries = []
    for entry in metadata.entries:
        if isinstance(entry, tuple) and entry[0] == "labels" and isinstance(entry[1], Map):
            helm = tuple((key, Expr(text)) for key, text in HELM_LABELS.items())
            entry = ("labels", Map(entry[1].entries + helm))
        entries.append(entry)
    return Map(tuple(entries))


def labelled(doc: Doc) -> Doc:
    if not isinstance(doc.body, Map):
        return doc
    body = _versions(doc.body)
    entries = tuple(
        ("metadata", _with_helm_labels(entry[1]))
        if isinstance(entry, tuple) and entry[0] == "metadata" and isinstance(entry[1], Map)
        else entry
        for entry in body.entries
    )
    return replace(doc, body=Map(entries))
