"""Names and labels every object of an install shares."""

from typing import Any

from spotpool_deploy.config import VERSION, InstallConfig


def selector_labels(config: InstallConfig) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "spotpool-operator",
        "app.kubernetes.io/instance": config.name,
    }


def labels(config: InstallConfig) -> dict[str, str]:
    return {
        **selector_labels(config),
        "app.kubernetes.io/part-of": "spotpool",
        "app.kubernetes.io/version": VERSION,
    }


def metadata(config: InstallConfig, name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = labels(config)
    return meta


def cluster_name(config: InstallConfig, role: str) -> str:
    """A cluster-wide name that two installs in different namespaces do not share."""
    return f"{config.name}-{config.namespace}-{role}"
