"""A setting's on and off renders merged into one template, its differences under `{{ if }}`."""

import difflib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from spotpool_deploy.chart.nodes import (
    Choice,
    Doc,
    Guard,
    GuardedEntries,
    GuardedItems,
    Map,
    Seq,
    doc_of,
    key_of,
    twin,
)
from spotpool_deploy.chart.settings import (
    FIXED,
    ChartError,
    Setting,
    construct,
    leaf_value,
    settings,
    structural_values,
)
from spotpool_deploy.config import InstallConfig
from spotpool_deploy.objects import Object, render


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
    then merged over the combinations of its own settings only (the others off), and only
    that object of each render is made a template."""
    all_settings = [s for s in settings() if s.path not in FIXED]
    structural = [s for s in all_settings if s.structural]
    leaves = {s.path: leaf_value(s) for s in all_settings if not s.structural}
    renders: dict[frozenset[Setting], dict[str, Object]] = {}
    converted: dict[tuple[frozenset[Setting], str], Doc | None] = {}

    def rendered(on: frozenset[Setting]) -> dict[str, Object]:
        if on not in renders:
            chosen = {s.path: structural_values(s)[0 if s in on else 1] for s in structural}
            objects = render(construct(InstallConfig, {**FIXED, **leaves, **chosen}, ()))
            objects = [obj for obj in objects if not twin(obj, all_settings)]
            renders[on] = {key_of(obj): obj for obj in objects}
            if len(renders[on]) != len(objects):
                raise ChartError("two objects of one kind share a name (in different namespaces)")
        return renders[on]

    def doc(on: frozenset[Setting], key: str) -> Doc | None:
        if (on, key) not in converted:
            found = rendered(on).get(key)
            converted[on, key] = None if found is None else doc_of(found, all_settings)
        return converted[on, key]

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
            found = doc(on, key)
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
