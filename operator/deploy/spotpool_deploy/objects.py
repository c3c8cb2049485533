"""Every Kubernetes object of an install, as plain dicts in the order they are applied."""

import copy
from typing import Any

from spotpool.api import crd
from spotpool_deploy import monitoring, rbac, workload
from spotpool_deploy.config import InstallConfig
from spotpool_deploy.meta import metadata

Object = dict[str, Any]


def namespace(config: InstallConfig) -> Object:
    meta = metadata(config, config.namespace)
    # The operator's pod meets the `restricted` Pod Security Standard: enforce it.
    meta["labels"] = {
        **meta["labels"],
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
    }
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def custom_resource_definition(config: InstallConfig) -> Object:
    """The Spotpool CRD, generated from the spec model (as crds/ is)."""
    definition = crd.render()
    definition["metadata"] = {
        **definition["metadata"],
        "labels": {**definition["metadata"].get("labels", {}), **metadata(config, "")["labels"]},
    }
    return definition


def render(config: InstallConfig) -> list[Object]:
    """Namespace and CRD first (the rest lives in or refers to them), then the account, its
    rights, the state volume, the operator, its metrics and notices Services, the Grafana
    dashboard and (when asked for) a ServiceMonitor. Fresh dicts each call."""
    objects: list[Object] = []
    if config.create_namespace:
        objects.append(namespace(config))
    if config.install_crd:
        objects.append(custom_resource_definition(config))
    objects.append(rbac.service_account(config))
    objects += rbac.roles(config)
    if config.file_backend:
        objects.append(workload.state_claim(config))
    objects.append(workload.deployment(config))
    objects.append(workload.disruption_budget(config))
    if config.metrics.service:
        objects.append(workload.metrics_service(config))
    if config.notices.enabled:
        objects.append(workload.notice_service(config))
    if config.monitoring.dashboard:
        objects.append(monitoring.dashboard_config_map(config))
    if config.monitoring.service_monitor:
        objects.append(monitoring.service_monitor(config))
    return copy.deepcopy(objects)


def identity(obj: Object) -> str:
    """kind/namespace/name (kind/name when cluster-scoped): unique within an install."""
    meta = obj["metadata"]
    where = f"{meta['namespace']}/" if "namespace" in meta else ""
    return f"{obj['kind']}/{where}{meta['name']}"
