"""A render with placeholders as a tree of template nodes: what is fixed, what a setting
writes, and (after `merge`) what a setting guards."""

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from spotpool_deploy.chart.settings import (
    ITEM_VAR,
    PLACEHOLDER,
    ChartError,
    RawPlaceholder,
    Setting,
    item_placeholder,
)
from spotpool_deploy.objects import Object, identity


@dataclass(frozen=True)
class Guard:
    expr: str
    positive: bool

    def open(self) -> str:
        return f"{{{{- if {self.expr} }}}}" if self.positive else f"{{{{- if not {self.expr} }}}}"


@dataclass(frozen=True)
class Expr:
    """A scalar the template writes: `text` is what follows `key: `."""

    text: str
    # inline: `key: TEXT`; map: a whole map, `key: {{- toYaml … | nindent N }}`; literal:
    # multi-line text as a `|` block (its `{{` escaped).
    style: Literal["inline", "map", "literal"] = "inline"


@dataclass(frozen=True)
class Splice:
    """A dict setting's entries among a map's own (`{**labels, **setting}`)."""

    expr: str


@dataclass(frozen=True)
class SpliceItems:
    """A list setting's items among a list's own (`[*items, *setting]`)."""

    expr: str


@dataclass(frozen=True)
class Choice:
    """A scalar that differs with a setting."""

    guard: Guard
    then: Any
    otherwise: Any


@dataclass(frozen=True)
class Map:
    entries: tuple[Any, ...]  # (key, node) pairs and GuardedEntries


@dataclass(frozen=True)
class GuardedEntries:
    guard: Guard
    entries: Map


@dataclass(frozen=True)
class Seq:
    items: tuple[Any, ...]  # nodes and GuardedItems


@dataclass(frozen=True)
class GuardedItems:
    guard: Guard
    items: Seq


@dataclass(frozen=True)
class Doc:
    key: str  # kind/name, placeholders and all
    file: str
    guards: tuple[Guard, ...]
    each: str | None  # a list setting's expr: one object per item
    body: Any


def _yaml_escape(text: str) -> str:
    return json.dumps(text)[1:-1]


def scalar_text(value: Any) -> str:
    if isinstance(value, Expr):
        if value.style != "inline":
            raise ChartError("a map or a text block cannot differ with another setting")
        return value.text
    if isinstance(value, Choice):
        then, otherwise = scalar_text(value.then), scalar_text(value.otherwise)
        expr = value.guard.expr if value.guard.positive else f"not {value.guard.expr}"
        return f"{{{{ if {expr} }}}}{then}{{{{ else }}}}{otherwise}{{{{ end }}}}"
    return json.dumps(value)


class Converter:
    """A render with placeholders → template nodes."""

    def __init__(self, by_path: dict[str, Setting], each: Setting | None) -> None:
        self.by_path = by_path
        self.each = each

    def setting(self, path: str) -> Setting:
        try:
            return self.by_path[path]
        except KeyError:
            raise ChartError(f"unknown placeholder for {path}") from None

    def node(self, value: Any) -> Any:
        if isinstance(value, dict):
            return self.map(value)
        if isinstance(value, list):
            return Seq(tuple(self.item(item) for item in value))
        if isinstance(value, RawPlaceholder):
            match = PLACEHOLDER.fullmatch(value)
            assert match is not None
            return Expr(f"{{{{ {self.setting(match['path']).expr} }}}}")
        if isinstance(value, str):
            return self.string(value)
        return value

    def item(self, value: Any) -> Any:
        match = PLACEHOLDER.fullmatch(value) if isinstance(value, str) else None
        if match is not None and match["kind"] == "W":
            return SpliceItems(self.setting(match["path"]).expr)
        omitted = self._omitted(value.values()) if isinstance(value, dict) else None
        if omitted is not None:  # an item such as {name: SPOTPOOL_X, value: <omitted setting>}
            return GuardedItems(Guard(omitted.expr, True), Seq((self.map(value, False),)))
        return self.node(value)

    def _omitted(self, values: Any) -> Setting | None:
        for value in values:
            match = PLACEHOLDER.fullmatch(value) if isinstance(value, str) else None
            if match is not None and match["kind"] == "" and match["path"] in self.by_path:
                setting = self.by_path[match["path"]]
                if setting.kind == "omitted":
                    return setting
        return None

    def map(self, value: dict[Any, Any], guard_omitted: bool = True) -> Any:
        dict_keys = {key: PLACEHOLDER.fullmatch(str(key)) for key in value}
        spliced = {k: m for k, m in dict_keys.items() if m is not None and m["kind"] == "D"}
        if len(value) == 1 and spliced:  # the map is the setting
            (match,) = spliced.values()
            expr = self.setting(match["path"]).expr
            return Expr(f"{{{{- toYaml {expr} | nindent {{indent}} }}}}", style="map")
        entries: list[Any] = []
        for key, item in value.items():
            if key in spliced:
                entries.append(Splice(self.setting(spliced[key]["path"]).expr))
            elif PLACEHOLDER.search(str(key)):
                entries.append((self.string(str(key)), self.node(item)))
            elif guard_omitted and (omitted := self._omitted([item])) is not None:
                entry = Map(((key, self.node(item)),))
                entries.append(GuardedEntries(Guard(omitted.expr, True), entry))
            else:
                entries.append(self._guarded((key, self.node(item)), item))
        return Map(tuple(entries))

    def _guarded(self, entry: tuple[Any, Any], item: Any) -> Any:
        """An entry that holds only whole settings (a map that is one, a list of their items)
        is written only when one of them is set, as the objects leave it out while empty."""
        found = [
            PLACEHOLDER.fullmatch(str(key))
            for key in (item if isinstance(item, dict) and len(item) == 1 else {})
        ]
        if isinstance(item, list) and item:
            found = [PLACEHOLDER.fullmatch(x) if isinstance(x, str) else None for x in item]
        whole = [self.setting(m["path"]) for m in found if m is not None]
        if not found or len(whole) != len(found) or any(s.kind != "whole" for s in whole):
            return entry
        exprs = [s.expr for s in whole]
        expr = exprs[0] if len(exprs) == 1 else f"or {' '.join(exprs)}"
        return GuardedEntries(Guard(expr, True), Map((entry,)))

    def string(self, value: str) -> Any:
        value = self._joins(value)
        parts: list[str | tuple[str]] = []  # literals, and (expr,) for template actions
        last = 0
        for match in PLACEHOLDER.finditer(value):
            parts.append(value[last : match.start()])
            parts.append((self._expr(match),))
            last = match.end()
        parts.append(value[last:])
        parts = [p for p in parts if p != ""]
        for part in parts:
            if isinstance(part, str) and "{{" in part:
                if len(parts) > 1:
                    raise ChartError(f"a setting is used inside text with '{{{{': {value!r}")
                if "\n" in part:  # Helm must not run it: `{{` escaped
                    return Expr(part.replace("{{", '{{ "{{" }}'), style="literal")
                return Expr(f"{{{{ {json.dumps(part)} | quote }}}}")
        if all(isinstance(p, str) for p in parts):
            return value
        if len(parts) == 1 and isinstance(parts[0], tuple):
            return Expr(f"{{{{ {parts[0][0]} | quote }}}}")
        text = "".join(
            _yaml_escape(p) if isinstance(p, str) else f"{{{{ {p[0]} }}}}" for p in parts
        )
        return Expr(f'"{text}"')

    def _joins(self, value: str) -> str:
        """`sep.join(list_setting)`: the two placeholder items with a separator between."""

        def joined(match: re.Match[str]) -> str:
            return f"__SPJ{match['sep'].encode().hex()}_{match['path']}__"

        pattern = r"__SPI0_(?P<path>[A-Za-z0-9.]+)__(?P<sep>[^_]*)__SPI1_(?P=path)__"
        return re.sub(pattern, joined, value)

    def _expr(self, match: re.Match[str]) -> str:
        setting = self.setting(match["path"])
        if match["kind"] == "I0":
            if self.each is None or self.each != setting:
                raise ChartError(f"an item of {setting.value_path} is used outside its objects")
            return ITEM_VAR
        if match["kind"].startswith("J"):
            separator = bytes.fromhex(match["kind"][1:]).decode()
            return f"join {json.dumps(separator)} {setting.expr}"
        if match["kind"] in ("I1", "D", "W"):
            raise ChartError(f"{setting.value_path} is used in a way the chart cannot template")
        return setting.expr


def _file_name(obj: Object) -> str:
    name = PLACEHOLDER.sub("", obj["metadata"]["name"]).strip("-")
    name = re.sub(r"-+", "-", name)
    return "-".join(p for p in (obj["kind"].lower(), name) if p) + ".yaml"


def key_of(obj: Object) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def is_twin(text: str, lists: list[Setting]) -> bool:
    """`text` (an object's JSON, lists joined) is the second item's twin of a ranged object."""
    return any(item_placeholder(s, 1) in text for s in lists)


def twin(obj: Object, all_settings: list[Setting]) -> bool:
    by_path = {s.value_path: s for s in all_settings}
    text = Converter(by_path, None)._joins(json.dumps(obj))
    return is_twin(text, [s for s in all_settings if s.kind == "list"])


def doc_of(obj: Object, all_settings: list[Setting]) -> Doc | None:
    """The object as a template node tree; None for the second item's twin of a ranged
    object (a Role per watched namespace is rendered for two items, templated from one)."""
    by_path = {s.value_path: s for s in all_settings}
    lists = [s for s in all_settings if s.kind == "list"]
    text = Converter(by_path, None)._joins(json.dumps(obj))
    if is_twin(text, lists):
        return None
    each = [s for s in lists if item_placeholder(s, 0) in text]
    if len(each) > 1:
        raise ChartError(f"{identity(obj)} depends on items of two lists")
    body = Converter(by_path, each[0] if each else None).node(obj)
    return Doc(
        key=key_of(obj),
        file=_file_name(obj),
        guards=(),
        each=each[0].expr if each else None,
        body=body,
    )
