"""Render the Spotpool CustomResourceDefinition from the pydantic models.

Pydantic's JSON schema is close to a Kubernetes structural schema; the differences handled
here: `$ref`s are inlined, `Optional` unions collapse to their type, titles go, and closed
objects drop `additionalProperties: false` (the API server prunes unknown fields instead).
"""

from typing import Any

import yaml
from pydantic import BaseModel

from spotpool.api.access import (
    ACCESS_KIND,
    ACCESS_PLURAL,
    AccessPolicySpec,
    AccessPolicyStatus,
)
from spotpool.api.spec import GROUP, KIND, PLURAL, SPEC_RULES, VERSION, SpotpoolSpec
from spotpool.api.status import SpotpoolStatus

CRD_PATH = "crds/devops.jokerbai.com_spotpools.yaml"
ACCESS_CRD_PATH = "crds/devops.jokerbai.com_spotpoolaccesspolicies.yaml"


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in node:
        choices = [c for c in node["anyOf"] if c != {"type": "null"}]
        if len(choices) == 1:
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            merged = {**_structural(choices[0], defs), **rest}
            if merged.get("default", "") is None:
                del merged["default"]
            return _structural(merged, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "$defs") or (key == "additionalProperties" and value is False):
            continue
        if key == "properties":
            out[key] = {name: _structural(prop, defs) for name, prop in value.items()}
        else:
            out[key] = _structural(value, defs)
    return out


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True)
    return dict(_structural(raw, raw.get("$defs", {})))


def render() -> dict[str, Any]:
    spec_schema = schema_of(SpotpoolSpec)
    spec_schema["x-kubernetes-validations"] = [
        {"rule": rule, "message": message} for rule, message in SPEC_RULES
    ]
    return _crd(
        kind=KIND,
        plural=PLURAL,
        scope="Namespaced",
        short_name="sp",
        description="A pool of Tencent Cloud spot CVM instances kept at its declared size; "
        "one Pulumi stack per pool.",
        properties={"spec": spec_schema, "status": schema_of(SpotpoolStatus)},
        subresources={
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector",
            },
        },
        columns=[
            _column("Desired", "integer", ".status.replicas"),
            _column("Ready", "integer", ".status.readyReplicas"),
            _column("Phase", "string", ".status.phase"),
            _column(
                "Reason",
                "string",
                '.status.conditions[?(@.type=="Ready")].reason',
                0,
                "Why the pool is Ready or not (the Ready condition's reason).",
            ),
            _column(
                "On-Demand",
                "integer",
                ".status.onDemandReplicas",
                0,
                "Instances running on-demand: a spot pool's fallbacks.",
            ),
            _column("Age", "date", ".metadata.creationTimestamp"),
            _column(
                "Cost",
                "number",
                ".status.hourlyCost",
                0,
                "What the pool's instances cost an hour now (status.hourlyCost).",
            ),
            # -o wide: which install, and trouble at a glance, without -o yaml
            _column(
                "Class",
                "string",
                ".spec.operatorClass",
                1,
                "The operator install that manages the pool (--operator-class).",
            ),
            _column(
                "Reclaims",
                "integer",
                ".status.reclaims.total",
                1,
                "Spot instances the cloud reclaimed from this pool.",
            ),
            _column(
                "Last-Reclaim",
                "date",
                ".status.reclaims.lastTime",
                1,
                "How long ago the last reclaim was found.",
            ),
            _column(
                "Last-Op",
                "string",
                ".status.stack.lastOperation.kind",
                1,
                "The last engine operation (up, refresh, destroy).",
            ),
            _column(
                "Result",
                "string",
                ".status.stack.lastOperation.result",
                1,
                "How the last engine operation ended (succeeded or failed).",
            ),
        ],
    )


def _crd(
    *,
    kind: str,
    plural: str,
    scope: str,
    short_name: str,
    description: str,
    properties: dict[str, Any],
    subresources: dict[str, Any],
    columns: list[dict[str, Any]],
) -> dict[str, Any]:
    """One CustomResourceDefinition of the group, served and stored at VERSION."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short_name],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                **properties,
                            },
                        }
                    },
                    "subresources": subresources,
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def _column(
    name: str, kind: str, path: str, priority: int = 0, description: str = ""
) -> dict[str, Any]:
    """A printer column; priority 1 shows only with `kubectl get -o wide`."""
    column: dict[str, Any] = {"name": name, "type": kind, "jsonPath": path}
    if priority:
        column["priority"] = priority
    if description:
        column["description"] = description
    return column


def render_access() -> dict[str, Any]:
    """The cluster-scoped SpotpoolAccessPolicy CRD (spotpool.api.access)."""
    return _crd(
        kind=ACCESS_KIND,
        plural=ACCESS_PLURAL,
        scope="Cluster",
        short_name="spap",
        description="What the cluster admin lets the Spotpools of some namespaces spend: the "
        "operator's identity, roles and accounts, regions, Secrets, and limits per namespace. "
        "Every policy selecting a namespace applies there; with none, a pool may use only "
        "Secrets of its namespace that opt in.",
        properties={
            "spec": schema_of(AccessPolicySpec),
            "status": schema_of(AccessPolicyStatus),
        },
        subresources={"status": {}},
        columns=[
            _column("Pools", "integer", ".status.pools"),
            _column("Instances", "integer", ".status.instances", 0, "Instances running."),
            _column(
                "Reserved",
                "integer",
                ".status.reserved.instances",
                0,
                "Instances reserved before their launch (surges, rollouts and retained "
                "instances included): what the limit is checked against.",
            ),
            _column(
                "Max-Instances",
                "integer",
                ".spec.limits.instances",
                0,
                "Instances a namespace may run (limits.instances, per namespace).",
            ),
            _column("Cost", "number", ".status.hourlyCost", 0, "What the instances cost an hour."),
            _column(
                "Reserved-Cost",
                "number",
                ".status.reserved.hourlyCost",
                0,
                "Hourly cost reserved before the launches (each priced before it is made).",
            ),
            _column(
                "Max-Cost",
                "number",
                ".spec.limits.hourlyCost",
                0,
                "What a namespace's instances may cost an hour (per namespace).",
            ),
            _column("Held", "integer", ".status.held"),
            _column("GPUs", "integer", ".status.gpus", 1),
            _column("Reserved-GPUs", "integer", ".status.reserved.gpus", 1),
            _column("Max-GPUs", "integer", ".spec.limits.gpus", 1),
            _column(
                "Busiest",
                "string",
                ".status.busiest",
                1,
                "The namespace nearest to a limit.",
            ),
            _column("Age", "date", ".metadata.creationTimestamp"),
        ],
    )


HEADER = "# Generated from spotpool.api by `spotpool crd generate`; do not edit by hand.\n"


def render_yaml() -> str:
    return HEADER + yaml.safe_dump(render(), sort_keys=False, width=100)


def render_access_yaml() -> str:
    return HEADER + yaml.safe_dump(render_access(), sort_keys=False, width=100)


# Each generated CRD file (crds/ and the chart's crds/), and what it holds.
GENERATED = {CRD_PATH: render_yaml, ACCESS_CRD_PATH: render_access_yaml}
