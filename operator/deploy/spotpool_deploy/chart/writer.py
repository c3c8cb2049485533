"""Template nodes as the text of a template file."""

import re
from collections.abc import Iterator
from typing import Any

from spotpool_deploy.chart.nodes import (
    Choice,
    Doc,
    Expr,
    GuardedEntries,
    GuardedItems,
    Map,
    Seq,
    Splice,
    SpliceItems,
    scalar_text,
)
from spotpool_deploy.chart.settings import ITEM_VAR, ChartError
from spotpool_deploy.kustomize import dump


class _Writer:
    """Template nodes → YAML with tokens (PyYAML does the quoting), tokens → template text."""

    def __init__(self) -> None:
        self.tokens: dict[str, str] = {}
        self.blocks: dict[str, str] = {}

    def _token(self, prefix: str, text: str) -> str:
        token = f"__SP{prefix}{len(self.tokens) + len(self.blocks)}__"
        (self.blocks if prefix in "KL" else self.tokens)[token] = text
        return token

    def plain(self, node: Any) -> Any:
        if isinstance(node, Expr) and node.style == "map":
            return self._token("K", node.text)
        if isinstance(node, Expr) and node.style == "literal":
            return self._token("L", node.text)
        if isinstance(node, (Expr, Choice)):
            return self._token("T", scalar_text(node))
        if isinstance(node, Map):
            out: dict[Any, Any] = {}
            for key, value in self._entries(node):
                if key in out:
                    raise ChartError(f"the key {key!r} differs in place with a setting")
                out[key] = value
            return out
        if isinstance(node, Seq):
            return list(self._items(node))
        return node

    def _entries(self, node: Map, top: bool = True) -> Iterator[tuple[Any, Any]]:
        entries = list(node.entries)
        if top and entries and not isinstance(entries[0], tuple):
            # A guard cannot open a list item's map (it would take the `- `): a plain key first.
            plain = next((i for i, e in enumerate(entries) if isinstance(e, tuple)), None)
            if plain is None:
                raise ChartError("a map whose every key depends on a setting")
            entries.insert(0, entries.pop(plain))
        for entry in entries:
            if isinstance(entry, Splice):
                yield self._token("S", entry.expr), None
            elif isinstance(entry, GuardedEntries):
                yield self._token("B", entry.guard.open()), None
                yield from self._entries(entry.entries, top=False)
                yield self._token("E", "{{- end }}"), None
            else:
                yield self.plain(entry[0]), self.plain(entry[1])

    def _items(self, node: Seq) -> Iterator[Any]:
        for item in node.items:
            if isinstance(item, GuardedItems):
                yield self._token("B", item.guard.open())
                yield from self._items(item.items)
                yield self._token("E", "{{- end }}")
            elif isinstance(item, SpliceItems):
                yield self._token("S", item.expr)
            else:
                yield self.plain(item)

    def text(self, body: Any) -> str:
        lines = []
        for line in dump(self.plain(body)).splitlines():
            marker = re.fullmatch(r"(\s*)(- )?(__SP([BES])\d+__)(: null)?", line)
            if marker:
                if marker[2] and marker[5]:
                    raise ChartError("a guard opens a list item's map")
                text = self.tokens[marker[3]]
                if marker[4] == "S":
                    text = f"{{{{- with {text} }}}}{{{{- toYaml . | nindent {len(marker[1])} }}}}"
                    text += "{{- end }}"
                lines.append(marker[1] + text)
                continue
            block = re.fullmatch(r"(\s*(?:- )?)(.+): (__SP([KL])\d+__)", line)
            if block:
                indent = len(block[1]) + 2
                text = self.blocks[block[3]]
                if block[4] == "K":
                    text = text.replace("{indent}", str(indent))
                    lines.append(f"{block[1]}{block[2]}: {text}")
                    continue
                lines.append(f"{block[1]}{block[2]}: |{_chomping(text)}")
                lines += [" " * indent + row if row else "" for row in text.splitlines()]
                continue
            lines.append(re.sub(r"__SPT\d+__", lambda m: self.tokens[m[0]], line))
        return "\n".join(lines) + "\n"


def _chomping(text: str) -> str:
    if text[:1].isspace():
        raise ChartError("a text block that starts with a space needs an indentation indicator")
    if not text.endswith("\n"):
        return "-"
    return "+" if text.endswith("\n\n") else ""


def doc_text(doc: Doc) -> str:
    opens = [guard.open() for guard in doc.guards]
    if doc.each:
        opens.append(f"{{{{- range {ITEM_VAR} := {doc.each} }}}}")
    body = _Writer().text(doc.body)
    ends = ["{{- end }}"] * len(opens)
    return "\n".join([*opens, "---", body.rstrip("\n"), *ends]) + "\n"
