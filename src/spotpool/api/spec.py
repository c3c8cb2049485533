"""`devops.jokerbai.com/v1` `Spotpool`: the spec and status models, one source of truth.

Field names and meanings of the article's API are kept as they are (secretId … instanceChargeType);
the rest are Spotpool's additions, each optional with a default. The CRD in `crds/` is generated
from these models, cross-field rules included (see `spotpool.api.crd`).
"""

import re
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from spotpool.api.identity import AssumeRole
from spotpool.api.nodes import NodesSpec

GROUP = "devops.jokerbai.com"
VERSION = "v1"
KIND = "Spotpool"
PLURAL = "spotpools"
MAX_POOL_SIZE = 1000
# The operator's own instance tags (stackconfig.TAG_*, spotpool-retained, the notice tags): a
# spec's tags may not set one (spotpool-retained would put the pool's leaks beyond the sweep).
RESERVED_TAG_PREFIX = "spotpool-"

# Cross-field rules, written once in CEL: the API server enforces them at admission
# (x-kubernetes-validations) and `SpotpoolSpec` checks the same rules in Python.
SPEC_RULES: list[tuple[str, str]] = [
    ("self.minimum <= self.maximum", "minimum must be less than or equal to maximum"),
    (
        "!has(self.replicas) || (self.replicas >= self.minimum && self.replicas <= self.maximum)",
        "replicas must lie between minimum and maximum",
    ),
    (
        "has(self.availabilityZone) || (has(self.availabilityZones) && "
        "size(self.availabilityZones) > 0)",
        "set availabilityZone or availabilityZones",
    ),
    (
        "has(self.instanceType) || (has(self.instanceTypes) && size(self.instanceTypes) > 0)",
        "set instanceType or instanceTypes",
    ),
    ("has(self.secretId) == has(self.secretKey)", "secretId and secretKey go together"),
    (
        "has(self.credentialsSecretRef) || has(self.secretId) || "
        "(has(self.useOperatorIdentity) && self.useOperatorIdentity)",
        "set credentialsSecretRef (recommended), the inline secretId and secretKey, or "
        "useOperatorIdentity: true (no keys: the operator's service-account token)",
    ),
    (
        "!has(self.refreshInterval) || duration(self.refreshInterval) >= duration('10s')",
        "refreshInterval must be at least 10s (reclaims are seen within seconds anyway; this "
        "is the period of the full Pulumi refresh)",
    ),
    (
        "!has(self.availabilityZones) || size(self.availabilityZones) <= 1 || "
        "!has(self.subnetId) || self.subnetId == 'DEFAULT'",
        "a subnet lives in one zone: with more than one zone set subnetIds (zone -> subnet), "
        "not one subnetId",
    ),
    (
        "!has(self.subnetIds) || (has(self.vpcId) && self.vpcId != 'DEFAULT')",
        "subnetIds needs the vpcId the subnets belong to",
    ),
    (
        "!(has(self.useOperatorIdentity) && self.useOperatorIdentity) || "
        "(!has(self.credentialsSecretRef) && !has(self.secretId))",
        "useOperatorIdentity takes no keys: remove credentialsSecretRef and secretId/secretKey, "
        "or set useOperatorIdentity to false",
    ),
    (
        f"!has(self.tags) || self.tags.all(k, !k.startsWith('{RESERVED_TAG_PREFIX}'))",
        f"tag keys starting with {RESERVED_TAG_PREFIX} are the operator's own (the pool, the "
        "slot, the install, spotpool-retained, ...): rename the tag",
    ),
]
MIN_REFRESH_SECONDS = 10


class Model(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are an error."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class ChargeType(StrEnum):
    SPOTPAID = "SPOTPAID"
    POSTPAID_BY_HOUR = "POSTPAID_BY_HOUR"


class PlacementStrategy(StrEnum):
    """How new spot slots choose among zone x type offerings (spec.placementStrategy)."""

    CAPACITY_OPTIMIZED = "capacityOptimized"
    PRICE_CAPACITY_OPTIMIZED = "priceCapacityOptimized"
    LOWEST_PRICE = "lowestPrice"
    LOWEST_INTERRUPTION_COST = "lowestInterruptionCost"


class DeletionPolicy(StrEnum):
    DELETE = "Delete"
    RETAIN = "Retain"


class DriftPolicy(StrEnum):
    """What a full refresh does about an instance changed outside the operator."""

    CORRECT = "Correct"  # report it, and the next up restores what the spec says
    REPORT = "Report"  # report it and leave it as found until the spec or the policy changes


class DiskType(StrEnum):
    CLOUD_BSSD = "CLOUD_BSSD"
    CLOUD_PREMIUM = "CLOUD_PREMIUM"
    CLOUD_SSD = "CLOUD_SSD"
    CLOUD_HSSD = "CLOUD_HSSD"
    CLOUD_TSSD = "CLOUD_TSSD"
    LOCAL_BASIC = "LOCAL_BASIC"
    LOCAL_SSD = "LOCAL_SSD"


class InternetChargeType(StrEnum):
    BANDWIDTH_POSTPAID_BY_HOUR = "BANDWIDTH_POSTPAID_BY_HOUR"
    TRAFFIC_POSTPAID_BY_HOUR = "TRAFFIC_POSTPAID_BY_HOUR"


class SecretKeyRef(Model):
    name: str = Field(description="Name of a Secret in the Spotpool's namespace.", min_length=1)
    key: str = Field(description="Key in the Secret's data.", min_length=1)


class CredentialsSecretRef(Model):
    name: str = Field(
        description="Name of a Secret in the Spotpool's namespace holding the API key pair.",
        min_length=1,
    )
    secret_id_key: str = Field("secretId", description="Key of the SecretId in the Secret.")
    secret_key_key: str = Field("secretKey", description="Key of the SecretKey in the Secret.")
    token_key: str = Field(
        "token",
        description="Key of the STS token in the Secret, read when present: temporary keys "
        "(TmpSecretId/TmpSecretKey) need their token.",
    )


class SystemDisk(Model):
    type: DiskType = Field(DiskType.CLOUD_BSSD, description="System disk type.")
    size: int = Field(100, ge=20, le=1024, description="System disk size in GB.")


class DataDisk(Model):
    type: DiskType = Field(DiskType.CLOUD_BSSD, description="Data disk type.")
    size: int = Field(ge=10, le=32000, description="Data disk size in GB.")
    delete_with_instance: bool = Field(
        True, description="Delete the disk with its instance (false: it outlives a reclaim)."
    )


class InternetAccessible(Model):
    charge_type: InternetChargeType = Field(
        InternetChargeType.BANDWIDTH_POSTPAID_BY_HOUR, description="How public traffic is billed."
    )
    max_bandwidth_out: int = Field(
        1, ge=0, le=1000, description="Public outbound bandwidth cap in Mbps; 0 means none."
    )
    public_ip_assigned: bool = Field(True, description="Give each instance a public IP.")


class LoginSettings(Model):
    key_ids: list[Annotated[str, Field(pattern=r"^skey-[0-9a-z]+$")]] | None = Field(
        None, description="SSH key pair ids (skey-...) installed on every instance."
    )
    password_secret_ref: SecretKeyRef | None = Field(
        None, description="Secret key holding the login password (never a built-in password)."
    )


class TerminationNotices(Model):
    enabled: bool = Field(
        True,
        description="Install the notice agent (a systemd unit, through the user data) on every "
        "instance, so a spot reclaim is replaced before it happens. Needs the operator's "
        "notice endpoint (--notice-port); changing it replaces the instances (new user data).",
    )
    command: str = Field(
        "spotpool notice-agent",
        pattern=r"^[A-Za-z0-9_./=: -]+$",
        max_length=256,
        description="What the unit runs; the image must provide it (see docs/notices.md).",
    )
    on_notice: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="A command the agent runs on the instance (`/bin/sh -c`, as the agent's "
        "user) when the notice comes, e.g. to save a checkpoint; its exit code and duration "
        "are reported to the operator (status.notices.checkpoints, a CheckpointSaved or "
        "CheckpointFailed Event). Changing it replaces the instances (new user data).",
    )
    on_notice_timeout_seconds: int = Field(
        90,
        ge=1,
        le=600,
        description="Seconds the onNotice command may run before it is killed (the cloud "
        "gives two minutes; the agent also stops it at the termination time).",
    )


SUBNET_ID = Annotated[str, Field(pattern=r"^subnet-[0-9a-z]+$", max_length=64)]
IMAGE_ID = Annotated[str, Field(pattern=r"^img-[0-9a-z]+$", max_length=64)]
SG_ID = Annotated[str, Field(pattern=r"^sg-[0-9a-z]+$", max_length=64)]
ZONE = Annotated[str, Field(pattern=r"^[a-z]{2}-[a-z0-9-]+-[0-9]+$", max_length=64)]
INSTANCE_TYPE = Annotated[str, Field(pattern=r"^[A-Za-z0-9]+\.[A-Z0-9]+$", max_length=64)]
DURATION = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"
# An install's class: a DNS label (it names the install's finalizer too).
OPERATOR_CLASS = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class OnDemandFallback(Model):
    """Fill a spot pool's slot on-demand when no spot offering can, and go back to spot when
    stock returns."""

    enabled: bool = Field(False, description="Create POSTPAID_BY_HOUR for a slot spot cannot fill.")
    max_on_demand: int = Field(
        1, ge=0, le=MAX_POOL_SIZE, description="Most on-demand instances in the pool at once."
    )
    return_after: str = Field(
        "5m",
        pattern=DURATION,
        min_length=2,
        description=(
            "Hysteresis of the way back: an on-demand slot returns to spot only after spot "
            "stock has been seen selling for this long without a break and the slot has been "
            "on-demand this long (so no slot moves back more than once per period)."
        ),
    )


class Disruption(Model):
    """How far a change that replaces instances (image, user data, type, notices on) may go at
    once: the replaced slots are converged in batches of at most maxUnavailable + maxSurge."""

    model_config = ConfigDict(
        **Model.model_config,
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.maxUnavailable + self.maxSurge > 0",
                    "message": "maxUnavailable and maxSurge cannot both be 0",
                }
            ]
        },
    )

    max_unavailable: int = Field(
        1,
        ge=0,
        le=MAX_POOL_SIZE,
        description="Slots per batch whose old instance goes before its new one is made.",
    )
    max_surge: int = Field(
        1,
        ge=0,
        le=MAX_POOL_SIZE,
        description="Slots per batch whose new instance is made before the old one goes: "
        "at most replicas + maxSurge instances at any time.",
    )

    @model_validator(mode="after")
    def _some_progress(self) -> "Disruption":
        if self.max_unavailable + self.max_surge == 0:
            raise ValueError("maxUnavailable and maxSurge cannot both be 0")
        return self


class SpotpoolSpec(Model):
    """What pool to keep: where, of which machines, and how many."""

    # --- the article's fields, names and meanings unchanged ---
    secret_id: str | None = Field(
        None,
        min_length=1,
        description="Inline API SecretId (kept for compatibility; prefer credentialsSecretRef).",
    )
    secret_key: str | None = Field(
        None,
        min_length=1,
        description="Inline API SecretKey (kept for compatibility; prefer credentialsSecretRef).",
    )
    region: str = Field(
        pattern=r"^[a-z]{2}-[a-z0-9-]+$",
        max_length=64,
        description="Tencent Cloud region, for example ap-singapore.",
    )
    availability_zone: ZONE | None = Field(
        None, description="Zone of the instances, for example ap-singapore-2."
    )
    instance_type: INSTANCE_TYPE | None = Field(
        None, description="CVM instance type, for example GN7.2XLARGE32."
    )
    minimum: int = Field(0, ge=0, le=MAX_POOL_SIZE, description="Fewest instances to keep.")
    maximum: int = Field(ge=0, le=MAX_POOL_SIZE, description="Most instances to keep.")
    subnet_id: str = Field(
        "DEFAULT",
        pattern=r"^(DEFAULT|subnet-[0-9a-z]+)$",
        description="Subnet of the instances, or DEFAULT for the default subnet.",
    )
    vpc_id: str = Field(
        "DEFAULT",
        pattern=r"^(DEFAULT|vpc-[0-9a-z]+)$",
        description="VPC of the instances, or DEFAULT for the default VPC.",
    )
    security_group_ids: list[SG_ID] | None = Field(
        None, max_length=5, description="Security groups (sg-...) of every instance."
    )
    image_id: str = Field(
        pattern=r"^img-[0-9a-z]+$", max_length=64, description="Image (img-...) to boot."
    )
    instance_charge_type: ChargeType = Field(
        ChargeType.SPOTPAID, description="SPOTPAID for spot instances, or POSTPAID_BY_HOUR."
    )
    # --- Spotpool's additions ---
    replicas: int | None = Field(
        None,
        ge=0,
        le=MAX_POOL_SIZE,
        description="Desired count, driven by `kubectl scale` or an autoscaler; "
        "defaults to minimum.",
    )
    credentials_secret_ref: CredentialsSecretRef | None = Field(
        None,
        description="Secret with the API key pair, and the token when the keys are temporary "
        "(recommended over inline keys). The Secret must opt in: the label or annotation "
        'spotpool.devops.jokerbai.com/usable: "true", or a SpotpoolAccessPolicy naming it.',
    )
    assume_role: AssumeRole | None = Field(
        None,
        description="A CAM role to assume (STS AssumeRole) with the Secret's keys or, when "
        "useOperatorIdentity is set, with the operator's own identity; the pool's instances "
        "run in the role's account. Temporary keys are renewed before they expire. Only a role "
        "the SpotpoolAccessPolicies selecting the namespace grant.",
    )
    use_operator_identity: bool = Field(
        False,
        description="Reach the cloud as the operator itself: its service-account token "
        "exchanged for the install's role (AssumeRoleWithWebIdentity); no Secret at all. Only "
        "where the SpotpoolAccessPolicies selecting the namespace grant operatorIdentity.",
    )
    availability_zones: list[ZONE] | None = Field(
        None, max_length=10, description="Zones to spread instances over, in slot order."
    )
    instance_types: list[INSTANCE_TYPE] | None = Field(
        None, max_length=10, description="Instance types to try in order when one has no stock."
    )
    spot_max_price: str | None = Field(
        None,
        pattern=r"^[0-9]+(\.[0-9]{1,4})?$",
        description="Highest hourly spot price to pay, as a decimal string; unset = market.",
    )
    placement_strategy: PlacementStrategy = Field(
        PlacementStrategy.LOWEST_INTERRUPTION_COST,
        description="Where new spot slots go: lowestInterruptionCost (offerings with stock to "
        "spare first, then the lowest expected cost per useful instance-hour: the spot price "
        "and the interruption rate the operator learned there, each interruption costing "
        "interruptionCostHours; with nothing learned, the lowest price), "
        "priceCapacityOptimized (stock to spare first, then the lowest spot price), "
        "capacityOptimized (stock, then the instanceTypes order) or lowestPrice (the lowest "
        "spot price among offerings that sell). Never an offering priced above spotMaxPrice.",
    )
    interruption_cost_hours: float = Field(
        1.0,
        ge=0,
        le=1000,
        description="What one interruption (a reclaim) costs the pool, in instance-hours of "
        "its price: the boot, the work since the last checkpoint, the gap. lowestInterruption"
        "Cost ranks an offering by price x (1 + learned interruptions an hour x this).",
    )
    system_disk: SystemDisk = Field(default_factory=SystemDisk, description="System disk.")
    internet_accessible: InternetAccessible = Field(
        default_factory=InternetAccessible, description="Public network access."
    )
    login_settings: LoginSettings | None = Field(None, description="How to log in.")
    user_data: str | None = Field(
        None, max_length=16384, description="Cloud-init user data (plain text)."
    )
    tags: dict[str, str] | None = Field(
        None,
        max_length=40,
        description="Extra tags on every instance (keys starting with spotpool- are the "
        "operator's own: refused).",
    )
    refresh_interval: str | None = Field(
        None,
        pattern=DURATION,
        min_length=2,
        description=(
            "How often to look for reclaimed instances, for example 30s, 5m, 1h "
            "(unset: the operator's --refresh-interval, 60s by default)."
        ),
    )
    deletion_policy: DeletionPolicy = Field(
        DeletionPolicy.DELETE,
        description="On deletion: Delete the instances, or Retain them and forget the stack.",
    )
    drift_policy: DriftPolicy = Field(
        DriftPolicy.CORRECT,
        description="An instance changed outside the operator (name, tags, security groups, "
        "stopped), as a full refresh finds it: Correct reports it (condition DriftDetected, an "
        "Event) and restores it with an up at once; Report reports it and leaves it as found "
        "until the spec or this policy changes.",
    )
    paused: bool = Field(False, description="Stop all changes to this pool while true.")
    on_demand_fallback: OnDemandFallback | None = Field(
        None,
        description="On-demand instances for slots no spot offering can fill (off by default).",
    )
    disruption: Disruption = Field(
        default_factory=Disruption,
        description="Bounded voluntary disruption: a change that replaces instances is rolled "
        "out in batches (maxUnavailable + maxSurge slots each); slots listed in the annotation "
        "devops.jokerbai.com/do-not-disrupt go last.",
    )
    termination_notices: TerminationNotices = Field(
        default_factory=TerminationNotices,
        description="Spot termination notices: an agent on each instance reports the cloud's "
        "two-minute warning and the operator starts the replacement at once.",
    )
    subnet_ids: dict[str, SUBNET_ID] | None = Field(
        None,
        max_length=10,
        description="Subnet per zone (zone -> subnet-...): a Tencent subnet lives in one zone. "
        "A zone not listed uses subnetId. Needs vpcId.",
    )
    image_ids: dict[str, IMAGE_ID] | None = Field(
        None,
        max_length=10,
        description="Image per instance type (type -> img-...); a type not listed boots imageId.",
    )
    data_disks: list[DataDisk] | None = Field(
        None, max_length=20, description="Data disks of every instance, in order."
    )
    cam_role_name: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_+=,.@-]+$",
        max_length=128,
        description="CAM role the instances assume (credentials on the instance, no keys).",
    )
    placement_group_id: str | None = Field(
        None,
        pattern=r"^ps-[0-9a-z]+$",
        max_length=64,
        description="Placement (disaster recovery) group (ps-...) of every instance.",
    )
    nodes: NodesSpec | None = Field(
        None,
        description="The instances join this cluster as nodes (their userData joins them; "
        "docs/nodes.md): the operator labels and taints each Node, shows which slot is which "
        "node, replaces an instance whose Node is not Ready in time, drains a node before a "
        "notice's reclaim or a voluntary termination, and deletes the Node of an instance the "
        "cloud took. Unset: the instances are not treated as nodes.",
    )
    operator_class: str | None = Field(
        None,
        pattern=OPERATOR_CLASS,
        max_length=40,
        description="The operator install that manages this pool: the one started with "
        "--operator-class set to this value (unset: the install with no class).",
    )

    @model_validator(mode="after")
    def _cross_field_rules(self) -> "SpotpoolSpec":
        problems = [message for rule, message in SPEC_RULES if not _holds(rule, self)]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def desired_count(self) -> int:
        wanted = self.minimum if self.replicas is None else self.replicas
        return max(self.minimum, min(self.maximum, wanted))

    def zones(self) -> list[str]:
        return list(self.availability_zones or [self.availability_zone or ""])

    def types(self) -> list[str]:
        return list(self.instance_types or [self.instance_type or ""])

    def uses_inline_credentials(self) -> bool:
        return self.secret_id is not None


def _holds(rule: str, spec: SpotpoolSpec) -> bool:
    """The Python side of SPEC_RULES (the CEL text is the API server's side)."""
    checks: dict[str, Any] = {
        SPEC_RULES[0][0]: spec.minimum <= spec.maximum,
        SPEC_RULES[1][0]: spec.replicas is None or spec.minimum <= spec.replicas <= spec.maximum,
        SPEC_RULES[2][0]: bool(spec.availability_zone or spec.availability_zones),
        SPEC_RULES[3][0]: bool(spec.instance_type or spec.instance_types),
        SPEC_RULES[4][0]: (spec.secret_id is None) == (spec.secret_key is None),
        SPEC_RULES[5][0]: spec.credentials_secret_ref is not None
        or spec.secret_id is not None
        or spec.use_operator_identity,
        SPEC_RULES[6][0]: spec.refresh_interval is None
        or not spec.refresh_interval
        or parse_duration(spec.refresh_interval) >= MIN_REFRESH_SECONDS,
        SPEC_RULES[7][0]: len(spec.availability_zones or []) <= 1 or spec.subnet_id == "DEFAULT",
        SPEC_RULES[8][0]: not spec.subnet_ids or spec.vpc_id != "DEFAULT",
        SPEC_RULES[9][0]: not spec.use_operator_identity
        or (spec.credentials_secret_ref is None and spec.secret_id is None),
        SPEC_RULES[10][0]: not any(k.startswith(RESERVED_TAG_PREFIX) for k in spec.tags or {}),
    }
    return bool(checks[rule])


def parse_duration(text: str) -> float:
    """Seconds in a duration such as 90s, 5m or 1h30m."""
    match = re.fullmatch(DURATION, text)
    if not match or not text:
        raise ValueError(f"not a duration: {text!r} (use for example 30s, 5m, 1h)")
    hours, minutes, seconds = (int(part[:-1]) if part else 0 for part in match.groups())
    return float(hours * 3600 + minutes * 60 + seconds)
