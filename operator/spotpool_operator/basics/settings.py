"""What one operator process is told: namespaces, backend and cloud, how much work at once."""

from typing import Literal

from pydantic import BaseModel, Field

from spotpool.engine.basics.settings import EngineSettings
from spotpool.engine.tencent.ratelimit import RateLimits
from spotpool_operator.cloud.fleet import ProbeSettings


class OperatorSettings(BaseModel):
    engine: EngineSettings
    namespaces: list[str] = Field(
        default_factory=list, description="Namespaces (or kopf glob patterns) to serve."
    )
    all_namespaces: bool = Field(False, description="Serve every namespace (cluster-wide).")
    max_concurrent: int = Field(4, ge=1, le=256, description="Engine operations in flight.")
    refresh_interval: float = Field(
        60.0, gt=0, description="Seconds between refreshes of a pool without refreshInterval."
    )
    full_refresh_every: int = Field(
        60,
        ge=0,
        description="Every N-th reclaim check runs a full Pulumi refresh even when a quick "
        "look at the cloud finds every instance alive (0: only when something is missing).",
    )
    probe: ProbeSettings = Field(
        default_factory=ProbeSettings,
        description="The fleet probe's API budget (budget 0 turns it off).",
    )
    avoid_seconds: float = Field(
        180.0,
        ge=0,
        description="After a reclaim or a no-stock answer, avoid that zone x instance type "
        "for this long when placing new instances (Karpenter's three minutes).",
    )
    interruption_half_life: float = Field(
        6 * 3600.0,
        gt=0,
        description="Seconds after which a learned interruption counts half (placement's "
        "interruption rates per zone x instance type).",
    )
    rate_limits: RateLimits = Field(
        default_factory=RateLimits, description="Tencent Cloud API calls a second per action."
    )
    operator_class: str = Field(
        "",
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$",
        max_length=40,
        description="Serve only the pools whose spec.operatorClass is this ('': none set).",
    )
    lease_name: str = Field("spotpool-operator", description="The writer's Lease.")
    lease_namespace: str | None = Field(
        None, description="Namespace of the Lease; None: no Lease (running by hand)."
    )
    lease_duration: float = Field(30.0, ge=5, description="Seconds a Lease lasts unrenewed.")
    shards: int = Field(
        16,
        ge=1,
        le=1024,
        description="Shards the pools hash onto, each a Lease held by one replica "
        "(1: the single Lease named lease_name, as before shards).",
    )
    max_concurrent_per_account: int = Field(
        8,
        ge=0,
        description="Engine operations at once on one cloud account across all replicas "
        "(each replica takes its share); 0: no bound beyond max_concurrent.",
    )
    fast_launch: bool = Field(
        True,
        description="Launch a reclaimed slot's next instance through the cloud API at once, "
        "before its Pulumi run (which adopts it): a storm goes at the account's RunInstances "
        "rate, not one Pulumi run per pool.",
    )
    sweep: Literal["terminate", "report", "off"] = Field(
        "terminate",
        description="The sweep of instances whose pool is gone: terminate them (proven this "
        "cluster's and install's, held by no stack, their pool missing for the orphan grace), "
        "report them only (Event OrphanFound, spotpool_orphans_reported_total), or off.",
    )
    take_over_from: list[str] = Field(
        default_factory=list,
        description="Cluster ids whose stacks this cluster takes over (the admin says they are "
        "gone for good); another live cluster's stack is otherwise never run from here.",
    )
    take_over_after: float = Field(
        7 * 86400.0,
        ge=0,
        description="Seconds after another cluster's newest claim a stack it holds is taken "
        "over without being named (0: only when named).",
    )
    backoff_base: float = Field(10.0, gt=0, description="First retry delay after a failure.")
    backoff_max: float = Field(300.0, gt=0, description="Longest retry delay after failures.")
    metrics_host: str = Field("127.0.0.1", description="Address of the metrics and health port.")
    metrics_port: int = Field(9090, ge=0, le=65535, description="Prometheus metrics; 0 = off.")
    liveness_port: int = Field(8081, ge=0, le=65535, description="kopf's /healthz; 0 = off.")
    liveness_host: str | None = Field(
        None, description="Address of the health port; None: the metrics port's."
    )

    notice_host: str = Field(
        "127.0.0.1", description="Address the termination-notice endpoint listens on."
    )
    notice_port: int = Field(
        0, ge=0, le=65535, description="Port of the termination-notice endpoint; 0 = off."
    )
    notice_url: str | None = Field(
        None,
        pattern=r"^https?://[^\s/]+(/[^\s]*)?$",
        description="The notice endpoint as instances reach it (the pools' agents report "
        "there); default http://HOST:PORT when HOST is a concrete address.",
    )

    notice_grace: float = Field(
        600.0,
        gt=0,
        description="Seconds after its notice was received an instance may still run before "
        "its surge instance is deleted (the reclaim is not coming).",
    )
    surge_max_life: float = Field(
        1800.0,
        gt=0,
        description="Seconds a surge instance lives at most, whatever its notice said: then it "
        "is deleted unless it took its slot.",
    )

    def notice_endpoint(self) -> str | None:
        """Where agents report, or None when notices are off (no agent is installed)."""
        if not self.notice_port:
            return None
        if self.notice_url:
            return self.notice_url.rstrip("/")
        if self.notice_host in ("0.0.0.0", "::", ""):
            return None  # nobody said which address the instances reach
        return f"http://{self.notice_host}:{self.notice_port}"

    def liveness_endpoint(self) -> str | None:
        if not self.liveness_port:
            return None
        return f"http://{self.liveness_host or self.metrics_host}:{self.liveness_port}/healthz"

    def account_share(self, replicas: int) -> float | None:
        """This replica's bound on one account's operations when `replicas` share the work:
        the replicas' shares add up to at most the account's bound, with more replicas than
        it allows too. Up to the bound, whole operations; beyond it, a fraction below one: one
        operation at a time with rests between, so the replica's average is its share
        (slots.py)."""
        limit = self.max_concurrent_per_account
        if not limit:
            return None
        replicas = max(1, replicas)
        return float(limit // replicas) if replicas <= limit else limit / replicas

    def backoff(self, retry: int) -> float:
        """Delay before retry number `retry` (0 for the first): doubling, capped."""
        return min(self.backoff_max, self.backoff_base * 2.0 ** min(retry, 16))
