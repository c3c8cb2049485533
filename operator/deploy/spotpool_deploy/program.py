"""The Pulumi program of the install: every object of `objects.render`, one resource each.

Run as the `spotpool-operator` Pulumi project in operator/deploy (`pulumi up` there), or inline
through the Automation API (`python -m spotpool_deploy up`).
"""

import json
from collections.abc import Callable
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pydantic.alias_generators import to_camel

from spotpool_deploy.config import InstallConfig
from spotpool_deploy.objects import Object, render

PROJECT = "spotpool-operator"
RESOURCES: dict[str, Callable[..., pulumi.CustomResource]] = {
    "v1/Namespace": k8s.core.v1.Namespace,
    "apiextensions.k8s.io/v1/CustomResourceDefinition": (
        k8s.apiextensions.v1.CustomResourceDefinition
    ),
    "v1/ServiceAccount": k8s.core.v1.ServiceAccount,
    "rbac.authorization.k8s.io/v1/ClusterRole": k8s.rbac.v1.ClusterRole,
    "rbac.authorization.k8s.io/v1/ClusterRoleBinding": k8s.rbac.v1.ClusterRoleBinding,
    "rbac.authorization.k8s.io/v1/Role": k8s.rbac.v1.Role,
    "rbac.authorization.k8s.io/v1/RoleBinding": k8s.rbac.v1.RoleBinding,
    "v1/PersistentVolumeClaim": k8s.core.v1.PersistentVolumeClaim,
    "apps/v1/Deployment": k8s.apps.v1.Deployment,
    "policy/v1/PodDisruptionBudget": k8s.policy.v1.PodDisruptionBudget,
    "v1/Service": k8s.core.v1.Service,
    "v1/ConfigMap": k8s.core.v1.ConfigMap,
    "monitoring.coreos.com/v1/ServiceMonitor": lambda name, opts, **args: (
        k8s.apiextensions.CustomResource(
            name, "monitoring.coreos.com/v1", "ServiceMonitor", opts=opts, **args
        )
    ),
}
# Created in this order; each tier waits for the ones before it.
TIERS = [
    {"Namespace", "CustomResourceDefinition"},
    {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"},
    {"PersistentVolumeClaim", "Service", "ConfigMap", "ServiceMonitor"},
    {"Deployment", "PodDisruptionBudget"},
]
ARG_NAMES = {
    "roleRef": "role_ref",
    "automountServiceAccountToken": "automount_service_account_token",
}


def _tier(obj: Object) -> int:
    return next(i for i, kinds in enumerate(TIERS) if obj["kind"] in kinds)


def resource_name(obj: Object) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else str(meta["name"])


def declare(config: InstallConfig, skip_await: bool = False) -> dict[str, pulumi.CustomResource]:
    """Declare the install; `skip_await` for clusters where no pod ever runs (no kubelet)."""
    declared: dict[str, pulumi.CustomResource] = {}
    earlier: list[pulumi.Resource] = []
    objects = sorted(render(config), key=_tier)  # stable: render's order within a tier
    for tier in range(len(TIERS)):
        this_tier: list[pulumi.Resource] = []
        for obj in (o for o in objects if _tier(o) == tier):
            if skip_await:
                annotations = obj["metadata"].setdefault("annotations", {})
                annotations["pulumi.com/skipAwait"] = "true"
            factory = RESOURCES[f"{obj['apiVersion']}/{obj['kind']}"]
            args = {
                ARG_NAMES.get(k, k): v for k, v in obj.items() if k not in ("apiVersion", "kind")
            }
            opts = pulumi.ResourceOptions(depends_on=list(earlier))
            resource = factory(resource_name(obj), opts=opts, **args)
            declared[f"{obj['kind']}/{resource_name(obj)}"] = resource
            this_tier.append(resource)
        earlier += this_tier
    pulumi.export("namespace", config.namespace)
    pulumi.export("serviceAccount", config.name)
    pulumi.export("watchNamespaces", config.watch_namespaces or "all")
    pulumi.export("objects", list(declared))
    return declared


def config_from_pulumi(cfg: pulumi.Config) -> InstallConfig:
    """InstallConfig from the stack's config: one key per field, camelCase (`pulumi config set
    image …`, `pulumi config set --path 'watchNamespaces[0]' team-a`)."""
    values: dict[str, Any] = {}
    if (policy := cfg.get("imagePullPolicy")) is not None:  # before image.pullPolicy
        values["image_pull_policy"] = policy
    for name, field in InstallConfig.model_fields.items():
        raw = cfg.get(field.alias or to_camel(name))
        if raw is None:
            continue
        if field.annotation in (str, str | None):
            values[name] = raw
            continue
        try:
            values[name] = json.loads(raw)
        except ValueError:
            values[name] = raw  # a Literal such as imagePullPolicy
    return InstallConfig.model_validate(values)


def main() -> dict[str, pulumi.CustomResource]:
    cfg = pulumi.Config()
    return declare(config_from_pulumi(cfg), skip_await=cfg.get_bool("skipAwait") or False)
