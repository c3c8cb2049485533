"""What an install is told: image, namespaces, backend, concurrency, refresh, resources."""

import re
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from spotpool.api.spec import parse_duration
from spotpool_deploy.model import OMIT_EMPTY, VERSION, Model
from spotpool_deploy.pod_settings import Global, Image, ServiceAccount

__all__ = ["OMIT_EMPTY", "VERSION", "Global", "Image", "InstallConfig", "Model", "ServiceAccount"]

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
API_LIMIT = re.compile(r"[A-Za-z]+=[0-9]*\.?[0-9]+(,[A-Za-z]+=[0-9]*\.?[0-9]+)*")


class SecretKey(Model):
    name: str = Field(description="Name of a Secret in the operator's namespace.")
    key: str = Field(description="Key of the value in that Secret.")


class Resources(Model):
    requests: dict[str, str] = Field(
        default_factory=lambda: {"cpu": "250m", "memory": "512Mi"},
        description="What the scheduler reserves: the operator plus one Pulumi engine at rest.",
    )
    limits: dict[str, str] = Field(
        default_factory=lambda: {"memory": "2Gi"},
        description="Each Pulumi operation runs the CLI and the tencentcloud plugin (~150 MiB "
        "each); no CPU limit, so operations are not throttled.",
    )


class Storage(Model):
    size: str = Field("1Gi", description="Size of the volume of the default file:// backend.")
    storage_class_name: str | None = Field(None, description="StorageClass; None: the default.")


class Metrics(Model):
    port: int = Field(9090, ge=1, le=65535, description="Port of the Prometheus /metrics.")
    service: bool = Field(
        True, description="A ClusterIP Service on that port, with prometheus.io/* annotations."
    )


class Notices(Model):
    """The endpoint the pools' notice agents report spot termination notices to
    (docs/notices.md). Off by default: turning it on changes every pool's user data, which
    replaces each pool's instances at its next up, and the instances must reach the endpoint
    from the VPC, which only the user knows how."""

    enabled: bool = Field(
        False,
        description="Serve termination notices: the operator listens on the port, a Service "
        "exposes it, and every pool's user data installs the notice agent (this rolls every "
        "pool's instances once).",
    )
    port: int = Field(8090, ge=1, le=65535, description="Port of the notice endpoint.")
    url: str | None = Field(
        None,
        pattern=r"^https?://[^\s/]+(/[^\s]*)?$",
        description="The endpoint as the instances reach it, rendered into their user data: "
        "for instances outside the cluster an address in their VPC, e.g. the notices Service "
        "as an internal LoadBalancer. None: the Service's in-cluster name "
        "http://<name>-notices.<namespace>.svc:<port>, which only agents that use the "
        "cluster's DNS resolve.",
    )
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        "ClusterIP",
        description="Type of the notices Service; LoadBalancer (with an internal-subnet "
        "annotation) gives the instances an address in the VPC.",
    )
    service_annotations: dict[str, str] = Field(
        default_factory=dict,
        description="Annotations of the notices Service, e.g. "
        "service.kubernetes.io/qcloud-loadbalancer-internal-subnetid for a TKE internal "
        "load balancer.",
    )


class Monitoring(Model):
    dashboard: bool = Field(
        True, description="Ship the Grafana dashboard as a ConfigMap (dashboard.json)."
    )
    dashboard_namespace: str | None = Field(
        None,
        description="Namespace of the dashboard's ConfigMap; None: the operator's. The Grafana "
        "sidecar of kube-prometheus-stack reads only Grafana's own namespace unless its "
        "searchNamespace says otherwise.",
    )
    dashboard_labels: dict[str, str] = Field(
        default_factory=lambda: {"grafana_dashboard": "1"},
        description="Labels the Grafana sidecar looks for (kube-prometheus-stack's default).",
    )
    dashboard_folder: str | None = Field(
        None, description="Grafana folder for the dashboard, through the annotation below."
    )
    dashboard_folder_annotation: str = Field(
        "grafana_folder", description="The sidecar's folderAnnotation."
    )
    service_monitor: bool = Field(
        False,
        description="Add a ServiceMonitor (needs the Prometheus Operator's CRDs) for the "
        "metrics Service.",
    )
    service_monitor_labels: dict[str, str] = Field(
        default_factory=dict,
        description="Extra labels of the ServiceMonitor, e.g. {release: kube-prometheus-stack} "
        "for that chart's default serviceMonitorSelector.",
    )
    scrape_interval: str = Field("30s", description="How often Prometheus scrapes the operator.")

    @field_validator("dashboard_namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        return None if value is None else _label(value)

    @field_validator("scrape_interval")
    @classmethod
    def _interval(cls, value: str) -> str:
        if parse_duration(value) <= 0:
            raise ValueError("monitoring.scrapeInterval must be longer than 0s")
        return value


class InstallConfig(Model):
    name: str = Field("spotpool-operator", description="Name of the Deployment and its account.")
    namespace: str = Field("spotpool-system", description="Namespace the operator runs in.")
    create_namespace: bool = Field(True, description="False: the namespace exists already.")
    install_crd: bool = Field(
        True, description="False: the Spotpool CRD is managed elsewhere (another install)."
    )
    image: Image = Field(
        default_factory=Image,
        description="Operator image: registry/repository:tag (a plain reference works too).",
    )
    image_pull_secrets: Annotated[list[dict[str, str]], OMIT_EMPTY] = Field(
        default_factory=list, description="Secrets to pull the image with ([{name: regcred}])."
    )
    watch_namespaces: list[str] = Field(
        default_factory=list,
        description="Namespaces whose Spotpools the operator serves, each granted a Role of "
        "its own; empty: every namespace (one ClusterRole, so Secrets in all namespaces).",
    )
    backend_url: str | None = Field(
        None,
        description="Pulumi state backend (s3://…, https://…, file://…); None: a file:// "
        "backend on a PersistentVolumeClaim.",
    )
    backend_credentials_secret: str | None = Field(
        None,
        description="Secret whose keys become the operator's environment (for example "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for s3://, PULUMI_ACCESS_TOKEN).",
    )
    passphrase_secret: SecretKey = Field(
        default_factory=lambda: SecretKey(name="spotpool-passphrase", key="passphrase"),
        description="Secret holding the passphrase that encrypts the stacks' secrets.",
    )
    secrets_provider: Literal["passphrase", "keyserver"] = Field(
        "passphrase",
        description="New stacks' secrets provider: passphrase (Pulumi's own; every Pulumi run "
        "derives its key) or keyserver (hashivault://spotpool: the operator serves the stacks' "
        "data keys on 127.0.0.1, wrapped under the passphrase; `spotpool stacks keys` serves "
        "them to the plain pulumi CLI).",
    )
    cloud_endpoint: str | None = Field(
        None, description="URL of `spotpool emulator serve`; None: the real Tencent Cloud."
    )
    max_concurrent: int = Field(4, ge=1, le=256, description="Engine operations in flight.")
    replicas: int = Field(
        1,
        ge=1,
        le=64,
        description="Operator pods; they divide the shards (and so the pools) among them. "
        "More than one needs a shared backendUrl (s3://…): a file:// volume is one pod's.",
    )
    shards: int = Field(
        16,
        ge=1,
        le=1024,
        description="Shards the pools hash onto, each a Lease one replica holds (1: a single "
        "Lease, one active replica).",
    )
    refresh_interval: str = Field("60s", description="Refresh period of pools that set none.")
    full_refresh_every: int = Field(
        60,
        ge=0,
        description="Each refresh first asks the cloud (one call) whether every instance is "
        "alive; a full Pulumi refresh runs only when one is missing, or every N-th refresh "
        "(0: never). --full-refresh-every.",
    )
    probe_budget: float = Field(
        1.0,
        ge=0,
        description="DescribeInstances calls a second the fleet probe may spend per key pair "
        "and region (0: no probe). --probe-budget.",
    )
    avoid_for: str = Field(
        "3m",
        description="After a reclaim or a no-stock answer, place new instances elsewhere than "
        "that zone and type for this long. --avoid-for.",
    )
    operation_timeout: str = Field(
        "30m",
        description="A Pulumi operation running longer is killed and retried. --operation-timeout.",
    )
    lease_duration: str = Field(
        "30s",
        description="How long a Lease lasts unrenewed (a killed replica's successor waits "
        "this). --lease-duration.",
    )
    api_limits: Annotated[str | None, OMIT_EMPTY] = Field(
        None,
        description="ACTION=CALLS_PER_SECOND overrides of the cloud API token buckets, "
        "comma-separated, e.g. RunInstances=5,DescribeInstances=20; None: Tencent's published "
        "limits. --api-limit.",
    )
    max_concurrent_per_account: int = Field(
        8,
        ge=0,
        description="Engine operations at once on one cloud account across all replicas "
        "(0: no bound). --max-concurrent-per-account.",
    )
    install_id: Annotated[str | None, OMIT_EMPTY] = Field(
        None,
        description="Names this install on every instance it makes (only its own orphans are "
        "adopted or terminated); None: <namespace>.<lease name>. --install-id.",
    )
    operator_class: Annotated[str | None, OMIT_EMPTY] = Field(
        None,
        description="Serve only the pools whose spec.operatorClass is this; None: the pools "
        "that set none. Installs watching the same namespaces need different classes. "
        "--operator-class.",
    )
    extra_args: Annotated[list[str], OMIT_EMPTY] = Field(
        default_factory=list,
        description="More arguments of `spotpool operator run` (any flag of its --help).",
    )
    extra_env: Annotated[list[dict[str, Any]], OMIT_EMPTY] = Field(
        default_factory=list,
        description="More environment variables of the operator ([{name, value}] or valueFrom).",
    )
    resources: Resources = Field(default_factory=Resources)
    node_selector: Annotated[dict[str, str], OMIT_EMPTY] = Field(
        default_factory=dict, description="nodeSelector of the operator's pods."
    )
    tolerations: Annotated[list[dict[str, Any]], OMIT_EMPTY] = Field(
        default_factory=list, description="tolerations of the operator's pods."
    )
    affinity: Annotated[dict[str, Any], OMIT_EMPTY] = Field(
        default_factory=dict,
        description="affinity of the operator's pods (replicas are spread over nodes anyway).",
    )
    priority_class_name: Annotated[str | None, OMIT_EMPTY] = Field(
        None, description="PriorityClass of the operator's pods."
    )
    pod_annotations: Annotated[dict[str, str], OMIT_EMPTY] = Field(
        default_factory=dict, description="Annotations of the operator's pods."
    )
    pod_labels: dict[str, str] = Field(
        default_factory=dict,
        description="Labels of the operator's pods, beside the install's own (which they may "
        "not replace).",
    )
    service_account: ServiceAccount = Field(default_factory=ServiceAccount)
    storage: Storage = Field(default_factory=Storage)
    monitoring: Monitoring = Field(default_factory=Monitoring)
    metrics: Metrics = Field(default_factory=Metrics)
    notices: Notices = Field(default_factory=Notices)
    global_: Global = Field(
        default_factory=Global,
        alias="global",
        description="Helm's values shared by a parent chart (elsewhere the same settings).",
    )

    @model_validator(mode="before")
    @classmethod
    def _pull_policy_beside_image(cls, value: Any) -> Any:
        """`imagePullPolicy`, the setting before image.pullPolicy, still works."""
        if not isinstance(value, dict):
            return value
        policy = value.get("imagePullPolicy", value.get("image_pull_policy"))
        if policy is None:
            return value
        value = {
            k: v for k, v in value.items() if k not in ("imagePullPolicy", "image_pull_policy")
        }
        image = value.get("image", {})
        image = (
            Image.model_validate(image).model_dump()
            if not isinstance(image, Image)
            else image.model_dump()
        )
        value["image"] = {**image, "pull_policy": policy}
        return value

    @field_validator("name", "namespace")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        return _label(value)

    @field_validator("watch_namespaces")
    @classmethod
    def _namespaces(cls, values: list[str]) -> list[str]:
        for value in values:
            _label(value)  # exact names: a Role needs a namespace that is known now
        if len(set(values)) != len(values):
            raise ValueError("watchNamespaces lists a namespace twice")
        return values

    @field_validator("refresh_interval", "operation_timeout", "lease_duration")
    @classmethod
    def _duration(cls, value: str, info: ValidationInfo) -> str:
        if parse_duration(value) <= 0:
            raise ValueError(f"{to_camel(info.field_name or '')} must be longer than 0s")
        return value

    @field_validator("avoid_for")
    @classmethod
    def _period(cls, value: str) -> str:
        parse_duration(value)
        return value

    @field_validator("api_limits")
    @classmethod
    def _limits(cls, value: str | None) -> str | None:
        if value is not None and not API_LIMIT.fullmatch(value):
            raise ValueError(f"{value!r}: give ACTION=CALLS_PER_SECOND[,…], e.g. RunInstances=5")
        return value

    @model_validator(mode="after")
    def _replicas_share_a_backend(self) -> "InstallConfig":
        if self.replicas > 1 and (self.backend_url or "file://").startswith("file://"):
            raise ValueError(
                f"replicas: {self.replicas} needs a shared backendUrl (s3://…, https://…): "
                "each pod would have a file:// backend of its own"
            )
        return self

    @model_validator(mode="after")
    def _monitor_has_a_service(self) -> "InstallConfig":
        if self.monitoring.service_monitor and not self.metrics.service:
            raise ValueError(
                "monitoring.serviceMonitor needs metrics.service: the ServiceMonitor scrapes "
                "the metrics Service"
            )
        return self

    @property
    def all_namespaces(self) -> bool:
        return not self.watch_namespaces

    @property
    def file_backend(self) -> bool:
        """True when the state lives on the install's own volume."""
        return self.backend_url is None


def _label(value: str) -> str:
    if len(value) > 63 or not DNS_LABEL.fullmatch(value):
        raise ValueError(f"{value!r} is not a Kubernetes name (lowercase letters, digits and -)")
    return value
