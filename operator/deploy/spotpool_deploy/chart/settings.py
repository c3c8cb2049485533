"""Every leaf setting of the install and the placeholders that stand for it in a render."""

import re
import types
import typing
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, TypeGuard, Union

from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from spotpool_deploy.config import OMIT_EMPTY, InstallConfig

# Helm's own decisions, not values: the release namespace, created before the release; the
# CRD, which the chart keeps in crds/ (Helm installs it first and never deletes it).
NOT_VALUES = {"namespace", "create_namespace", "install_crd"}
FIXED: dict[tuple[str, ...], Any] = {("create_namespace",): False, ("install_crd",): False}
ITEM_VAR = "$item"


class ChartError(Exception):
    """The source uses a setting in a way the generator cannot template; says which."""


# whole: a map or list written whole (or spliced) only when set; omitted: an optional scalar
# whose entry (or list item) is written only when set. Neither is rendered off: the template
# guards them where they are used (`nodes`), which keeps the renders few.
Kind = Literal["scalar", "int", "dict", "bool", "optional", "list", "whole", "omitted"]


@dataclass(frozen=True)
class Setting:
    path: tuple[str, ...]  # field names from InstallConfig down
    kind: Kind
    int_inner: bool = False  # an optional int
    is_map: bool = False  # a whole setting that is a map (else a list)

    @cached_property
    def value_path(self) -> str:
        return ".".join(value_name(part) for part in self.path)

    @cached_property
    def expr(self) -> str:
        if self.path == ("namespace",):
            return "$.Release.Namespace"
        return f"$.Values.{self.value_path}"

    @property
    def structural(self) -> bool:
        return self.kind in ("bool", "optional", "list")


def value_name(field_name: str) -> str:
    """The chart value of a field: camelCase, without the `_` of a Python keyword (global_)."""
    return to_camel(field_name.rstrip("_"))


class RawPlaceholder(str):
    """An int setting's placeholder: where the source uses it as it is (not `str()` of it),
    the template writes the number unquoted. `str()` and f-strings give a plain str."""


def _placeholder(setting: Setting) -> str:
    return f"__SP_{setting.value_path}__"


def item_placeholder(setting: Setting, index: int) -> str:
    return f"__SPI{index}_{setting.value_path}__"


def _dict_key(setting: Setting) -> str:
    return f"__SPD_{setting.value_path}__"


def _whole_items(setting: Setting) -> str:
    return f"__SPW_{setting.value_path}__"


# kind: "" a value, I0/I1 a list's two items, D a dict, J<hex> a list joined by a separator,
# W a list's items spliced whole among others
PLACEHOLDER = re.compile(r"__SP(?P<kind>I0|I1|D|W|J[0-9a-f]*|)_(?P<path>[A-Za-z0-9.]+)__")


def is_model(annotation: Any) -> TypeGuard[type[BaseModel]]:
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
        if is_model(annotation):
            found += settings(annotation, path)
        elif annotation is bool:
            found.append(Setting(path, "bool"))
        elif OMIT_EMPTY in field.metadata and origin in (list, dict):
            found.append(Setting(path, "whole", is_map=origin is dict))
        elif annotation in (int, float):
            found.append(Setting(path, "int"))
        elif annotation is str or origin is Literal:
            found.append(Setting(path, "scalar"))
        elif origin is list:
            found.append(Setting(path, "list"))
        elif origin is dict:
            found.append(Setting(path, "dict"))
        elif inner in (str, int) and field.default is None and OMIT_EMPTY in field.metadata:
            found.append(Setting(path, "omitted", int_inner=inner is int))
        elif inner in (str, int) and field.default is None:
            found.append(Setting(path, "optional", int_inner=inner is int))
        else:
            raise ChartError(
                f"InstallConfig.{'.'.join(path)}: a {annotation} setting has no chart value yet "
                "(spotpool_deploy/chart/settings.py maps str, int, float, bool, Optional, list and "
                "dict)"
            )
    return found


def structural_values(setting: Setting) -> tuple[Any, Any]:
    """The setting on, then off."""
    if setting.kind == "bool":
        return True, False
    if setting.kind == "list":
        return [item_placeholder(setting, 0), item_placeholder(setting, 1)], []
    return _scalar_placeholder(setting, setting.int_inner), None


def _scalar_placeholder(setting: Setting, raw: bool) -> Any:
    return RawPlaceholder(_placeholder(setting)) if raw else _placeholder(setting)


def leaf_value(setting: Setting) -> Any:
    """A whole setting is rendered set: the template guards what it writes (`nodes`)."""
    if setting.kind == "dict" or (setting.kind == "whole" and setting.is_map):
        return {_dict_key(setting): "x"}
    if setting.kind == "whole":
        return [_whole_items(setting)]
    return _scalar_placeholder(setting, setting.kind == "int" or setting.int_inner)


def construct(
    model: type[BaseModel], values: dict[tuple[str, ...], Any], prefix: tuple[str, ...]
) -> Any:
    """The config with placeholders: model_construct, as placeholders would fail validation."""
    fields: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        if is_model(field.annotation):
            fields[name] = construct(field.annotation, values, path)
        else:
            fields[name] = values[path]
    return model.model_construct(**fields)
