"""The operator's Deployment, its metrics Service and the volume of the default file backend.

The paths and the user id match operator/Dockerfile: the root filesystem is read-only, so
every directory the operator or Pulumi writes is a volume.
"""

from typing import Any

from spotpool_deploy.config import InstallConfig
from spotpool_deploy.meta import labels, metadata, selector_labels

USER_ID = 10001  # the image's `spotpool` user
METRICS_PORT = 9090  # `spotpool operator run` defaults (the install: metrics.port)
LIVENESS_PORT = 8081
STATE_DIR = "/var/lib/spotpool/state"  # the file:// backend (PersistentVolumeClaim)
WORK_DIR = "/var/lib/spotpool/work"  # per-stack workspaces, rebuilt from the backend
PULUMI_HOME = "/var/lib/spotpool/pulumi"  # Pulumi's own home; the image links its plugins in
PASSPHRASE_DIR = "/etc/spotpool/passphrase"


def state_claim_name(config: InstallConfig) -> str:
    return f"{config.name}-state"


def state_claim(config: InstallConfig) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": config.storage.size}},
    }
    if config.storage.storage_class_name is not None:
        spec["storageClassName"] = config.storage.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(config, state_claim_name(config), config.namespace),
        "spec": spec,
    }


def _env(config: InstallConfig) -> list[dict[str, str]]:
    backend = config.backend_url or f"file://{STATE_DIR}/backend"
    env = {
        "SPOTPOOL_BACKEND_URL": backend,
        "SPOTPOOL_PASSPHRASE_FILE": f"{PASSPHRASE_DIR}/passphrase",
        "SPOTPOOL_SECRETS_PROVIDER": config.secrets_provider,
        "SPOTPOOL_WORK_DIR": WORK_DIR,
        "SPOTPOOL_MAX_CONCURRENT": str(config.max_concurrent),
        "SPOTPOOL_SHARDS": str(config.shards),
        "SPOTPOOL_REFRESH_INTERVAL": config.refresh_interval,
        "SPOTPOOL_FULL_REFRESH_EVERY": str(config.full_refresh_every),
        "SPOTPOOL_PROBE_BUDGET": number_text(config.probe_budget),
        "SPOTPOOL_AVOID_FOR": config.avoid_for,
        "SPOTPOOL_OPERATION_TIMEOUT": config.operation_timeout,
        "SPOTPOOL_LEASE_DURATION": config.lease_duration,
        "SPOTPOOL_MAX_CONCURRENT_PER_ACCOUNT": str(config.max_concurrent_per_account),
        "SPOTPOOL_METRICS_HOST": "0.0.0.0",
        "SPOTPOOL_METRICS_PORT": str(config.metrics.port),
        "SPOTPOOL_LIVENESS_PORT": str(LIVENESS_PORT),
        "SPOTPOOL_LOG_FORMAT": "json",
        "PULUMI_HOME": PULUMI_HOME,
        "XDG_STATE_HOME": "/var/lib/spotpool",
        "HOME": "/tmp",
    }
    if config.all_namespaces:
        env["SPOTPOOL_ALL_NAMESPACES"] = "true"
    else:
        env["SPOTPOOL_NAMESPACE"] = ",".join(config.watch_namespaces)
    if config.cloud_endpoint is not None:
        env["SPOTPOOL_CLOUD_ENDPOINT"] = config.cloud_endpoint
    if config.operator_class is not None:
        env["SPOTPOOL_OPERATOR_CLASS"] = config.operator_class
    if config.install_id is not None:
        env["SPOTPOOL_INSTALL_ID"] = config.install_id
    if config.api_limits is not None:
        env["SPOTPOOL_API_LIMITS"] = config.api_limits
    if config.notices.enabled:
        env["SPOTPOOL_NOTICE_HOST"] = "0.0.0.0"
        env["SPOTPOOL_NOTICE_PORT"] = str(config.notices.port)
        env["SPOTPOOL_NOTICE_URL"] = config.notices.url or notice_service_url(config)
    return [{"name": key, "value": value} for key, value in env.items()] + list(config.extra_env)


def number_text(value: float | str) -> str:
    """A number as Helm's templates print it (1.0 as 1); a chart placeholder as it is."""
    if isinstance(value, str):
        return str(value)
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def image(config: InstallConfig) -> str:
    registry = config.image.registry or config.global_.image_registry
    name = f"{config.image.repository}:{config.image.tag}"
    return f"{registry}/{name}" if registry else name


def _volumes(config: InstallConfig) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [
        {
            "name": "passphrase",
            "secret": {
                "secretName": config.passphrase_secret.name,
                "items": [{"key": config.passphrase_secret.key, "path": "passphrase"}],
                "defaultMode": 0o440,
            },
        },
        {"name": "work", "emptyDir": {}},
        {"name": "pulumi-home", "emptyDir": {}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if config.file_backend:
        claim = {"claimName": state_claim_name(config)}
        volumes.append({"name": "state", "persistentVolumeClaim": claim})
    return volumes


def _mounts(config: InstallConfig) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [
        {"name": "passphrase", "mountPath": PASSPHRASE_DIR, "readOnly": True},
        {"name": "work", "mountPath": WORK_DIR},
        {"name": "pulumi-home", "mountPath": PULUMI_HOME},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if config.file_backend:
        mounts.append({"name": "state", "mountPath": STATE_DIR})
    return mounts


def _probe(period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": "/healthz", "port": "liveness"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def _container(config: InstallConfig) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "operator",
        "image": image(config),
        "imagePullPolicy": config.image.pull_policy,
        "args": ["operator", "run", *config.extra_args],
        "env": _env(config),
        "ports": [
            {"name": "metrics", "containerPort": config.metrics.port, "protocol": "TCP"},
            {"name": "liveness", "containerPort": LIVENESS_PORT, "protocol": "TCP"},
        ]
        + (
            [{"name": "notices", "containerPort": config.notices.port, "protocol": "TCP"}]
            if config.notices.enabled
            else []
        ),
        # kopf answers /healthz once it has connected and started its watches.
        "startupProbe": _probe(period=5, failures=36),
        "livenessProbe": _probe(period=20, failures=3),
        "readinessProbe": _probe(period=10, failures=3),
        "resources": config.resources.model_dump(),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": _mounts(config),
    }
    if config.backend_credentials_secret is not None:
        container["envFrom"] = [{"secretRef": {"name": config.backend_credentials_secret}}]
    return container


def deployment(config: InstallConfig) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(config, config.name, config.namespace),
        "spec": {
            # Replicas divide the shards (Leases): each pool has one writer at a time, so a
            # rollout may overlap old and new pods; a file backend's volume is one pod's.
            "replicas": config.replicas,
            "strategy": (
                {"type": "Recreate"}
                if config.file_backend
                else {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
                }
            ),
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(config)},
            "template": {
                "metadata": _pod_metadata(config),
                "spec": {
                    "serviceAccountName": config.name,
                    "automountServiceAccountToken": True,
                    "enableServiceLinks": False,
                    # Pulumi operations finish their step, kopf hands back; then SIGKILL.
                    "terminationGracePeriodSeconds": 60,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": USER_ID,
                        "runAsGroup": USER_ID,
                        "fsGroup": USER_ID,
                        "fsGroupChangePolicy": "OnRootMismatch",
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [_container(config)],
                    "volumes": _volumes(config),
                    "topologySpreadConstraints": _spread(config),
                    **_scheduling(config),
                },
            },
        },
    }


def _pod_metadata(config: InstallConfig) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": {**labels(config), **config.pod_labels}}
    if config.pod_annotations:
        meta["annotations"] = dict(config.pod_annotations)
    return meta


def _scheduling(config: InstallConfig) -> dict[str, Any]:
    """Where the pods may run and what they pull with: each left out while unset."""
    spec: dict[str, Any] = {}
    if config.node_selector:
        spec["nodeSelector"] = dict(config.node_selector)
    if config.tolerations:
        spec["tolerations"] = list(config.tolerations)
    if config.affinity:
        spec["affinity"] = dict(config.affinity)
    if config.priority_class_name is not None:
        spec["priorityClassName"] = config.priority_class_name
    secrets = [*config.image_pull_secrets, *config.global_.image_pull_secrets]
    if secrets:
        spec["imagePullSecrets"] = secrets
    return spec


def _spread(config: InstallConfig) -> list[dict[str, Any]]:
    """Replicas on different nodes when the cluster has them: a node's loss is one replica's
    (a preference, beside whatever `affinity` the install sets)."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector_labels(config)},
        }
    ]


def disruption_budget(config: InstallConfig) -> dict[str, Any]:
    """Voluntary evictions (node drains) take one replica at a time: the others keep serving
    and take its shards over once it has given them back."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(config, config.name, config.namespace),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(config)}},
    }


def metrics_service(config: InstallConfig) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            **metadata(config, f"{config.name}-metrics", config.namespace),
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(config.metrics.port),
                "prometheus.io/path": "/metrics",
            },
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(config),
            "ports": [
                {
                    "name": "metrics",
                    "port": config.metrics.port,
                    "targetPort": "metrics",
                    "protocol": "TCP",
                }
            ],
        },
    }


def notice_service_name(config: InstallConfig) -> str:
    return f"{config.name}-notices"


def notice_service_url(config: InstallConfig) -> str:
    """The notices Service by its in-cluster name (agents that use the cluster's DNS)."""
    return f"http://{notice_service_name(config)}.{config.namespace}.svc:{config.notices.port}"


def notice_service(config: InstallConfig) -> dict[str, Any]:
    """Where the pools' agents report termination notices. Every replica listens; one that
    does not serve the pool's shard answers 503 and the agent retries (another may)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            **metadata(config, notice_service_name(config), config.namespace),
            "annotations": dict(config.notices.service_annotations),
        },
        "spec": {
            "type": config.notices.service_type,
            "selector": selector_labels(config),
            "ports": [
                {
                    "name": "notices",
                    "port": config.notices.port,
                    "targetPort": "notices",
                    "protocol": "TCP",
                }
            ],
        },
    }
