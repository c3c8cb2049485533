"""values.yaml and values.schema.json from InstallConfig, and the values of a given install."""

import textwrap
from typing import Any

from pydantic import BaseModel

from spotpool.api.spec import DURATION
from spotpool_deploy.chart.settings import NOT_VALUES, is_model, settings, value_name
from spotpool_deploy.config import API_LIMIT, DNS_LABEL, InstallConfig
from spotpool_deploy.kustomize import dump

HEADER = (
    "# Generated from operator/deploy/spotpool_deploy: do not edit.\n"
    "# Regenerate: spotpool deploy render (or: cd operator/deploy && python -m spotpool_deploy"
    " render)\n"
)


def values_yaml() -> str:
    defaults = InstallConfig().model_dump(by_alias=True)
    lines = [HEADER.rstrip("\n"), '# The settings of the install (docs/deploy.md, "Settings").', ""]

    def emit(model: type[BaseModel], values: dict[str, Any], indent: int) -> None:
        pad = " " * indent
        for name, field in model.model_fields.items():
            if indent == 0 and name in NOT_VALUES:
                continue
            alias = value_name(name)
            text = (field.description or "").replace("None:", "null:")  # as YAML spells it
            for line in textwrap.wrap(text, 96 - indent, break_on_hyphens=False):
                lines.append(f"{pad}# {line}")
            if is_model(field.annotation):
                lines.append(f"{pad}{alias}:")
                emit(field.annotation, values[alias], indent + 2)
            else:
                lines.extend(pad + line for line in dump({alias: values[alias]}).splitlines())
            if indent == 0:
                lines.append("")

    emit(InstallConfig, defaults, 0)
    return "\n".join(lines).rstrip("\n") + "\n"


def schema() -> dict[str, Any]:
    schema = InstallConfig.model_json_schema(by_alias=True)
    for name in NOT_VALUES:
        schema["properties"].pop(value_name(name), None)
        if "required" in schema:
            schema["required"] = [r for r in schema["required"] if r != value_name(name)]
    # What the model's validators check, as JSON Schema, so `helm` refuses what `render` does
    # (tests/deploy/test_helm.py checks that both reject the same values).
    label = {"pattern": f"^{DNS_LABEL.pattern}$", "maxLength": 63}
    duration = {"pattern": DURATION, "minLength": 2}
    properties, defs = schema["properties"], schema["$defs"]
    properties["name"].update(label)
    properties["watchNamespaces"]["items"].update(label)
    properties["watchNamespaces"]["uniqueItems"] = True
    for name in ("refreshInterval", "avoidFor", "operationTimeout", "leaseDuration"):
        properties[name].update(duration)
    properties["apiLimits"]["anyOf"][0]["pattern"] = f"^{API_LIMIT.pattern}$"
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
            mine, default = mine[value_name(part)], default[value_name(part)]
        mine.update({key: None for key in default if key not in mine})
    return values
