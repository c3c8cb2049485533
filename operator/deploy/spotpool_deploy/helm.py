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

import difflib
import json
import re
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, TypeGuard, Union

from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from spotpool.api.spec import DURATION
from spotpool_deploy.config import DNS_LABEL, VERSION, InstallConfig
from spotpool_deploy.kustomize import dump, files_drift
from spotpool_deploy.objects import Object, identity, render

CHART_NAME = "spotpool"
HEADER = (
    "# Generated from operator/deploy/spotpool_deploy: do not edit.\n"
    "# Regenerate: spotpool deploy render (or: cd operator/deploy && python -m spotpool_deploy"
    " render)\n"
)
# Helm's own decisions, not values: the release namespace, created before the release.
NOT_VALUES = {"namespace", "create_namespace"}
FIXED: dict[tuple[str, ...], Any] = {("create_namespace",): False}
ITEM_VAR = "$item"


class ChartError(Exception):
    """The source uses a setting in a way the generator cannot template; says which."""


# --- settings and placeholders ---------------------------------------------------------------

Kind = Literal["scalar", "int", "dict", "bool", "optional", "list"]


@dataclass(frozen=True)
class Setting:
    path: tuple[str, ...]  # field names from InstallConfig down
    kind: Kind
    int_inner: bool = False  # an optional int

    @property
    def value_path(self) -> str:
        return ".".join(to_camel(part) for part in self.path)

    @property
    def expr(self) -> str:
        if self.path == ("namespace",):
            return "$.Release.Namespace"
        return f"$.Values.{self.value_path}"

    @property
    def structural(self) -> bool:
        return self.kind in ("bool", "optional", "list")


class RawPlaceholder(str):
    """An int setting's placeholder: where the source uses it as it is (not `str()` of it),
    the template writes the number unquoted. `str()` and f-strings give a plain str."""


def _placeholder(setting: Setting) -> str:
    return f"__SP_{setting.value_path}__"


def _item(setting: Setting, index: int) -> str:
    return f"__SPI{index}_{setting.value_path}__"


def _dict_key(setting: Setting) -> str:
    return f"__SPD_{setting.value_path}__"


# kind: "" a value, I0/I1 a list's two items, D a dict, J<hex> a list joined by a separator
PLACEHOLDER = re.compile(r"__SP(?P<kind>I0|I1|D|J[0-9a-f]*|)_(?P<path>[A-Za-z0-9.]+)__")


def _is_model(annotation: Any) -> TypeGuard[type[BaseModel]]:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _optional_inner(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            return args[0]
    return None


def settings(model: type[BaseModel] = InstallConfig, prefix: tuple[str, ...] = ()) -> list[Setting]:
    """Every leaf setting of the install, with how the chart treats it."""
    found: list[Setting] = []
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        annotation = field.annotation
        origin = typing.get_origin(annotation)
        inner = _optional_inner(annotation)
        if _is_model(annotation):
            found += settings(annotation, path)
        elif annotation is bool:
            found.append(Setting(path, "bool"))
        elif annotation is int:
            found.append(Setting(path, "int"))
        elif annotation is str or origin is Literal:
            found.append(Setting(path, "scalar"))
        elif origin is list:
            found.append(Setting(path, "list"))
        elif origin is dict:
            found.append(Setting(path, "dict"))
        elif inner in (str, int) and field.default is None:
            found.append(Setting(path, "optional", int_inner=inner is int))
        else:
            raise ChartError(
                f"InstallConfig.{'.'.join(path)}: a {annotation} setting has no chart value yet "
                "(spotpool_deploy/helm.py maps str, int, bool, Optional, list and dict)"
            )
    return found


def _structural_values(setting: Setting) -> tuple[Any, Any]:
    """The setting on, then off."""
    if setting.kind == "bool":
        return True, False
    if setting.kind == "list":
        return [_item(setting, 0), _item(setting, 1)], []
    return _scalar_placeholder(setting, setting.int_inner), None


def _scalar_placeholder(setting: Setting, raw: bool) -> Any:
    return RawPlaceholder(_placeholder(setting)) if raw else _placeholder(setting)


def _leaf_value(setting: Setting) -> Any:
    if setting.kind == "dict":
        return {_dict_key(setting): "x"}
    return _scalar_placeholder(setting, setting.kind == "int")


def _construct(
    model: type[BaseModel], values: dict[tuple[str, ...], Any], prefix: tuple[str, ...]
) -> Any:
    """The config with placeholders: model_construct, as placeholders would fail validation."""
    fields: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        if _is_model(field.annotation):
            fields[name] = _construct(field.annotation, values, path)
        else:
            fields[name] = values[path]
    return model.model_construct(**fields)


# --- the template tree -----------------------------------------------------------------------


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


def _scalar_text(value: Any) -> str:
    if isinstance(value, Expr):
        if value.style != "inline":
            raise ChartError("a map or a text block cannot differ with another setting")
        return value.text
    if isinstance(value, Choice):
        then, otherwise = _scalar_text(value.then), _scalar_text(value.otherwise)
        expr = value.guard.expr if value.guard.positive else f"not {value.guard.expr}"
        return f"{{{{ if {expr} }}}}{then}{{{{ else }}}}{otherwise}{{{{ end }}}}"
    return json.dumps(value)


class _Converter:
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
            return Seq(tuple(self.node(item) for item in value))
        if isinstance(value, RawPlaceholder):
            match = PLACEHOLDER.fullmatch(value)
            assert match is not None
            return Expr(f"{{{{ {self.setting(match['path']).expr} }}}}")
        if isinstance(value, str):
            return self.string(value)
        return value

    def map(self, value: dict[Any, Any]) -> Any:
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
            else:
                entries.append((key, self.node(item)))
        return Map(tuple(entries))

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
        if match["kind"] in ("I1", "D"):
            raise ChartError(f"{setting.value_path} is used in a way the chart cannot template")
        return setting.expr


def _file_name(obj: Object) -> str:
    name = PLACEHOLDER.sub("", obj["metadata"]["name"]).strip("-")
    name = re.sub(r"-+", "-", name)
    return "-".join(p for p in (obj["kind"].lower(), name) if p) + ".yaml"


def _docs_of(objects: list[Object], all_settings: list[Setting]) -> list[Doc]:
    by_path = {s.value_path: s for s in all_settings}
    lists = [s for s in all_settings if s.kind == "list"]
    docs = []
    for obj in objects:
        text = _Converter(by_path, None)._joins(json.dumps(obj))
        if any(_item(s, 1) in text for s in lists):
            continue  # the second item's twin of a ranged object
        each = [s for s in lists if _item(s, 0) in text]
        if len(each) > 1:
            raise ChartError(f"{identity(obj)} depends on items of two lists")
        converter = _Converter(by_path, each[0] if each else None)
        body = converter.node(obj)
        docs.append(
            Doc(
                key=f"{obj['kind']}/{obj['metadata']['name']}",
                file=_file_name(obj),
                guards=(),
                each=each[0].expr if each else None,
                body=body,
            )
        )
    if len({doc.key for doc in docs}) != len(docs):
        raise ChartError("two objects of one kind share a name (in different namespaces)")
    return docs


# --- merging a setting's on and off renders --------------------------------------------------


def _merge(on: Any, off: Any, guard: Guard) -> Any:
    if on == off:
        return on
    if isinstance(on, Map) and isinstance(off, Map):
        return Map(_merge_entries(on.entries, off.entries, guard))
    if isinstance(on, Seq) and isinstance(off, Seq):
        return Seq(_merge_items(on.items, off.items, guard))
    if isinstance(on, (Map, Seq)) or isinstance(off, (Map, Seq)):
        raise ChartError(f"a value is a map or list only when {guard.expr} is set")
    return Choice(guard, on, off)


def _entry_key(entry: Any) -> Any:
    return ("key", entry[0]) if isinstance(entry, tuple) else ("guarded", entry)


def _item_key(item: Any) -> Any:
    if isinstance(item, Map):
        for entry in item.entries:
            if isinstance(entry, tuple) and entry[0] == "name":
                return ("named", entry[1])
    return ("item", item)


def _aligned(
    on: tuple[Any, ...], off: tuple[Any, ...], key: Any
) -> Iterator[tuple[str, list[Any], list[Any]]]:
    matcher = difflib.SequenceMatcher(
        None, [key(x) for x in on], [key(x) for x in off], autojunk=False
    )
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        yield tag, list(on[i1:i2]), list(off[j1:j2])


def _merge_entries(on: tuple[Any, ...], off: tuple[Any, ...], guard: Guard) -> tuple[Any, ...]:
    merged: list[Any] = []
    for tag, left, right in _aligned(on, off, _entry_key):
        if tag == "equal":
            for a, b in zip(left, right, strict=True):
                merged.append((a[0], _merge(a[1], b[1], guard)) if isinstance(a, tuple) else a)
            continue
        if left:
            merged.append(GuardedEntries(guard, Map(tuple(left))))
        if right:
            merged.append(GuardedEntries(replace(guard, positive=False), Map(tuple(right))))
    return tuple(merged)


def _merge_items(on: tuple[Any, ...], off: tuple[Any, ...], guard: Guard) -> tuple[Any, ...]:
    merged: list[Any] = []
    for tag, left, right in _aligned(on, off, _item_key):
        if tag == "equal":
            merged += [_merge(a, b, guard) for a, b in zip(left, right, strict=True)]
            continue
        if left:
            merged.append(GuardedItems(guard, Seq(tuple(left))))
        if right:
            merged.append(GuardedItems(replace(guard, positive=False), Seq(tuple(right))))
    return tuple(merged)


def _merge_docs(on: list[Doc], off: list[Doc], guard: Guard) -> list[Doc]:
    negative = replace(guard, positive=False)
    merged: list[Doc] = []
    for _, left, right in _aligned(tuple(on), tuple(off), lambda d: (d.key, d.guards, d.each)):
        if len(left) == len(right) and all(
            (a.key, a.guards, a.each) == (b.key, b.guards, b.each)
            for a, b in zip(left, right, strict=True)
        ):
            merged += [
                replace(a, body=_merge(a.body, b.body, guard))
                for a, b in zip(left, right, strict=True)
            ]
            continue
        merged += [replace(d, guards=(guard, *d.guards)) for d in left]
        merged += [replace(d, guards=(negative, *d.guards)) for d in right]
    return merged


def templates() -> list[Doc]:
    """Every object of the install as a template, guarded by the settings it depends on.

    All combinations of the structural settings would be 2^n renders. Each object depends on
    few of them: those whose toggle changes it, from all off and from all on. Each object is
    then merged over the combinations of its own settings only (the others off)."""
    all_settings = [s for s in settings() if s.path not in FIXED]
    structural = [s for s in all_settings if s.structural]
    leaves = {s.path: _leaf_value(s) for s in all_settings if not s.structural}
    renders: dict[frozenset[Setting], dict[str, Doc]] = {}

    def rendered(on: frozenset[Setting]) -> dict[str, Doc]:
        if on not in renders:
            chosen = {s.path: _structural_values(s)[0 if s in on else 1] for s in structural}
            config = _construct(InstallConfig, {**FIXED, **leaves, **chosen}, ())
            renders[on] = {doc.key: doc for doc in _docs_of(render(config), all_settings)}
        return renders[on]

    depends: dict[str, set[Setting]] = {}
    for base in (frozenset(), frozenset(structural)):
        for setting in structural:
            one, other = rendered(base), rendered(base ^ {setting})
            for key in [*one, *other]:
                depends.setdefault(key, set())
                if one.get(key) != other.get(key):
                    depends[key].add(setting)

    def docs(key: str, on: frozenset[Setting], left: list[Setting]) -> list[Doc]:
        if not left:
            found = rendered(on).get(key)
            return [] if found is None else [found]
        setting, rest = left[0], left[1:]
        return _merge_docs(
            docs(key, on | {setting}, rest), docs(key, on, rest), Guard(setting.expr, True)
        )

    return [
        doc
        for key, settings_of_key in depends.items()
        for doc in docs(key, frozenset(), [s for s in structural if s in settings_of_key])
    ]


# --- writing the templates -------------------------------------------------------------------


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
            return self._token("T", _scalar_text(node))
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

    def _entries(self, node: Map) -> Iterator[tuple[Any, Any]]:
        entries = list(node.entries)
        if entries and not isinstance(entries[0], tuple):
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
                yield from self._entries(entry.entries)
                yield self._token("E", "{{- end }}"), None
            else:
                yield self.plain(entry[0]), self.plain(entry[1])

    def _items(self, node: Seq) -> Iterator[Any]:
        for item in node.items:
            if isinstance(item, GuardedItems):
                yield self._token("B", item.guard.open())
                yield from self._items(item.items)
                yield self._token("E", "{{- end }}")
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


def _doc_text(doc: Doc) -> str:
    opens = [guard.open() for guard in doc.guards]
    if doc.each:
        opens.append(f"{{{{- range {ITEM_VAR} := {doc.each} }}}}")
    body = _Writer().text(doc.body)
    ends = ["{{- end }}"] * len(opens)
    return "\n".join([*opens, "---", body.rstrip("\n"), *ends]) + "\n"


def _values_yaml() -> str:
    defaults = InstallConfig().model_dump(by_alias=True)
    lines = [HEADER.rstrip("\n"), '# The settings of the install (docs/deploy.md, "Settings").', ""]

    def emit(model: type[BaseModel], values: dict[str, Any], indent: int) -> None:
        pad = " " * indent
        for name, field in model.model_fields.items():
            if indent == 0 and name in NOT_VALUES:
                continue
            alias = to_camel(name)
            text = (field.description or "").replace("None:", "null:")  # as YAML spells it
            for line in textwrap.wrap(text, 96 - indent, break_on_hyphens=False):
                lines.append(f"{pad}# {line}")
            if _is_model(field.annotation):
                lines.append(f"{pad}{alias}:")
                emit(field.annotation, values[alias], indent + 2)
            else:
                lines.extend(pad + line for line in dump({alias: values[alias]}).splitlines())
            if indent == 0:
                lines.append("")

    emit(InstallConfig, defaults, 0)
    return "\n".join(lines).rstrip("\n") + "\n"


def _schema() -> dict[str, Any]:
    schema = InstallConfig.model_json_schema(by_alias=True)
    for name in NOT_VALUES:
        schema["properties"].pop(to_camel(name), None)
        if "required" in schema:
            schema["required"] = [r for r in schema["required"] if r != to_camel(name)]
    # What the model's validators check, as JSON Schema, so `helm` refuses what `render` does
    # (tests/deploy/test_helm.py checks that both reject the same values).
    label = {"pattern": f"^{DNS_LABEL.pattern}$", "maxLength": 63}
    duration = {"pattern": DURATION, "minLength": 2}
    properties, defs = schema["properties"], schema["$defs"]
    properties["name"].update(label)
    properties["watchNamespaces"]["items"].update(label)
    properties["watchNamespaces"]["uniqueItems"] = True
    properties["refreshInterval"].update(duration)
    defs["Monitoring"]["properties"]["scrapeInterval"].update(duration)
    defs["Monitoring"]["properties"]["dashboardNamespace"]["anyOf"][0].update(label)
    schema["allOf"] = CROSS_FIELD_RULES
    schema["$comment"] = HEADER.replace("# ", "").replace("\n", " ").strip()
    return schema


CROSS_FIELD_RULES: list[dict[str, Any]] = [
    {  # InstallConfig._replicas_share_a_backend
        "if": {"properties": {"replicas": {"minimum": 2}}, "required": ["replicas"]},
        "then": {
            "properties": {"backendUrl": {"type": "string", "not": {"pattern": "^file://"}}},
            "required": ["backendUrl"],
        },
    },
    {  # InstallConfig._monitor_has_a_service
        "if": {
            "properties": {
                "monitoring": {
                    "properties": {"serviceMonitor": {"const": True}},
                    "required": ["serviceMonitor"],
                }
            },
            "required": ["monitoring"],
        },
        "then": {"properties": {"metrics": {"properties": {"service": {"const": True}}}}},
    },
]


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
        by_file.setdefault(doc.file, []).append(_doc_text(doc))
    out = {
        "Chart.yaml": _chart_yaml(),
        "values.yaml": _values_yaml(),
        "values.schema.json": json.dumps(_schema(), indent=2) + "\n",
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


def values_for(config: InstallConfig) -> dict[str, Any]:
    """The chart values that give the install `config` describes (in `config.namespace`).
    Helm merges a map value into the chart's default map: a default key the config does not
    have is set to null, which drops it."""
    values = config.model_dump(by_alias=True, exclude=NOT_VALUES)
    defaults = InstallConfig().model_dump(by_alias=True, exclude=NOT_VALUES)
    for setting in settings():
        if setting.kind != "dict":
            continue
        mine, default = values, defaults
        for part in setting.path:
            mine, default = mine[to_camel(part)], default[to_camel(part)]
        mine.update({key: None for key in default if key not in mine})
    return values
