"""What Prometheus and Grafana need from an install: the dashboard as a ConfigMap the Grafana
sidecar of kube-prometheus-stack picks up, and (optionally) a ServiceMonitor for the metrics
Service. The dashboard itself is one file, dashboard.json beside this module."""

import json
from importlib import resources
from typing import Any

from spotpool_deploy.config import InstallConfig
from spotpool_deploy.meta import metadata, selector_labels

DASHBOARD_FILE = "dashboard.json"
DASHBOARD_KEY = "spotpool.json"  # the file name the sidecar writes into Grafana's folder


def dashboard_text() -> str:
    return resources.files("spotpool_deploy").joinpath(DASHBOARD_FILE).read_text()


def dashboard() -> dict[str, Any]:
    found: dict[str, Any] = json.loads(dashboard_text())
    return found


def dashboard_config_map(config: InstallConfig) -> dict[str, Any]:
    settings = config.monitoring
    meta = metadata(
        config, f"{config.name}-dashboard", settings.dashboard_namespace or config.namespace
    )
    meta["labels"] = {**meta["labels"], **settings.dashboard_labels}
    if settings.dashboard_folder:
        meta["annotations"] = {settings.dashboard_folder_annotation: settings.dashboard_folder}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {DASHBOARD_KEY: dashboard_text()},
    }


def service_monitor(config: InstallConfig) -> dict[str, Any]:
    """Scrapes the metrics Service. `honorLabels`: the metrics' own `namespace` label (the
    pool's) wins over the target's (the operator's), which would otherwise rename it."""
    settings = config.monitoring
    meta = metadata(config, config.name, config.namespace)
    meta["labels"] = {**meta["labels"], **settings.service_monitor_labels}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": selector_labels(config)},
            "namespaceSelector": {"matchNames": [config.namespace]},
            "endpoints": [
                {
                    "port": "metrics",
                    "path": "/metrics",
                    "interval": settings.scrape_interval,
                    "honorLabels": True,
                }
            ],
        },
    }
