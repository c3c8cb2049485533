"""What the operator reports back on a Spotpool: the article's fields plus Spotpool's."""

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from spotpool.api.drift import InstanceDrift
from spotpool.api.nodes import NodeSlot
from spotpool.api.spec import Model


class Phase(StrEnum):
    PENDING = "Pending"
    CONVERGING = "Converging"
    READY = "Ready"
    DEGRADED = "Degraded"
    PAUSED = "Paused"
    DELETING = "Deleting"


class ConditionType(StrEnum):
    """The conditions a Spotpool carries. Ready, Reconciling and Stalled follow kstatus (what
    Flux, Argo CD and `kubectl wait` read); Progressing and Degraded say more."""

    READY = "Ready"
    RECONCILING = "Reconciling"  # True while the operator works toward the spec
    STALLED = "Stalled"  # True when it cannot get there without a change (spec, Secret, quota)
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    DRIFT_DETECTED = "DriftDetected"  # True while a refresh finds instances changed by hand


class Instance(Model):
    instance_id: str = Field(description="CVM instance id (ins-...).")
    public_ip: str | None = Field(None, description="First public IP, if any.")
    private_ip: str | None = Field(None, description="First private IP.")
    zone: str | None = Field(None, description="Availability zone.")
    instance_type: str | None = Field(None, description="CVM instance type.")
    state: str | None = Field(None, description="Instance state as the cloud reports it.")
    slot: int | None = Field(None, description="Slot of the pool this instance fills.")
    charge_type: str | None = Field(
        None,
        description="SPOTPAID, or POSTPAID_BY_HOUR (in a spot pool: an on-demand fallback, "
        "moved back to spot when stock returns).",
    )
    nonce: str | None = Field(
        None,
        description="The instance's generation, drawn at its create: its termination-notice "
        "token is bound to it (not a secret).",
    )
    price: float | None = Field(
        None,
        ge=0,
        description="Hourly price of this instance as the cloud lists it for its zone and type: "
        "the spot price, or the on-demand price for an on-demand (POSTPAID_BY_HOUR) one.",
    )
    gpus: int | None = Field(
        None,
        ge=0,
        description="GPUs of this instance, as the cloud's data for its type says (unset: not "
        "known).",
    )


class Condition(Model):
    """A metav1.Condition."""

    type: str = Field(
        description="Ready, Reconciling, Stalled, Progressing or Degraded (or another type)."
    )
    status: str = Field(description="True, False or Unknown.")
    reason: str = Field(description="One CamelCase word a program can match on.")
    message: str = Field("", description="What happened, for a person.")
    last_transition_time: datetime = Field(description="When status last changed.")
    observed_generation: int | None = Field(None, description="Generation this was set for.")


class Changes(Model):
    create: int = 0
    update: int = 0
    replace: int = 0
    delete: int = 0
    same: int = 0


class Operation(Model):
    kind: str = Field(description="up, refresh, preview or destroy.")
    result: str = Field(description="succeeded or failed.")
    start_time: datetime
    end_time: datetime | None = None
    changes: Changes = Field(default_factory=Changes)


class StackStatus(Model):
    name: str = Field(description="Pulumi stack name, <namespace>.<name>.")
    backend: str = Field(description="State backend URL (no credentials).")
    last_operation: Operation | None = None


class StatusWriter(Model):
    """Who wrote the status: the replica holding the pool's shard Lease, with the Lease's
    fencing token (its transition count when that replica took it). A replica's write that
    arrives after a newer holder's (a stalled request) is refused by the API server."""

    lease: str = Field(description="The shard Lease the writer held.")
    lease_uid: str = Field("", description="That Lease's uid (a recreated Lease counts anew).")
    token: int = Field(ge=0, description="The Lease's leaseTransitions when the writer took it.")
    holder: str = Field(description="The writer's Lease holder identity.")


class Reclaims(Model):
    total: int = Field(0, description="Spot instances the cloud reclaimed from this pool.")
    last_time: datetime | None = Field(None, description="When the last reclaim was found.")


class AcceptedNotice(Model):
    """A termination notice taken in whose replacement has not started yet."""

    slot: int = Field(description="The slot whose instance the cloud will take.")
    instance_id: str = Field(description="That instance (ins-...).")
    termination_time: datetime = Field(description="When the cloud said it takes it.")
    received_time: datetime = Field(description="When the operator received the notice.")


class Checkpoint(Model):
    """What the onNotice command did on a noticed instance, as its agent reported it."""

    slot: int = Field(description="The slot of the noticed instance.")
    instance_id: str = Field(description="The noticed instance (ins-...).")
    exit_code: int = Field(description="0: it succeeded; -N: killed by signal N.")
    seconds: float = Field(description="How long it ran.")
    timed_out: bool = Field(False, description="Killed at its timeout.")
    time: datetime = Field(description="When the operator received the report.")


class Notices(Model):
    total: int = Field(0, description="Spot termination notices acted on (replaced ahead).")
    last_time: datetime | None = Field(None, description="When the last notice came in.")
    accepted: list[AcceptedNotice] = Field(
        default_factory=list,
        description="Notices taken in whose replacement has not started yet: the replica that "
        "serves the pool next starts them (a shard move loses none).",
    )
    checkpoints: list[Checkpoint] = Field(
        default_factory=list,
        description="The onNotice command's last results (newest last, at most 10).",
    )
    unfulfilled: list[str] = Field(
        default_factory=list,
        description="Instances (ins-...) whose notice went unfulfilled (their replacement was "
        "deleted as NoticeUnfulfilled): a further notice of theirs starts no replacement.",
    )


class Surge(Model):
    """A slot's replacement, started on a termination notice while its instance still runs."""

    slot: int = Field(description="The slot it replaces the instance of.")
    instance_id: str = Field(description="The replacement (ins-...).")
    replacing: str | None = Field(None, description="The slot's instance the cloud will take.")
    termination_time: datetime | None = Field(
        None, description="When the cloud said it takes that instance."
    )
    received_time: datetime | None = Field(
        None, description="When its notice was received: the notice grace counts from here."
    )
    start_time: datetime | None = Field(
        None,
        description="When the operator started it, or first saw it: its life is capped from here.",
    )
    state: str | None = Field(None, description="The replacement's state as the cloud says.")


class PlacedOffering(Model):
    """One zone x type a new slot of the pool may go to, as placement ranked it."""

    zone: str = Field(description="Availability zone.")
    instance_type: str = Field(description="CVM instance type.")
    price: float | None = Field(None, description="Spot price an hour (None: not reported).")
    stock: str | None = Field(
        None, description="EnoughStock, NormalStock, UnderStock, WithoutStock or SoldOut."
    )
    interruption_rate: float = Field(
        0.0, ge=0, description="Reclaims and notices learned per instance-hour run there."
    )
    observed_hours: float = Field(
        0.0, ge=0, description="Instance-hours the operator saw run there (decayed)."
    )
    score: float | None = Field(
        None,
        description="What the strategy compared after stock: the expected cost per useful "
        "instance-hour (lowestInterruptionCost) or the spot price.",
    )
    instances: int = Field(0, ge=0, description="The pool's instances there now.")
    note: str | None = Field(None, description="Why it is not tried, or tried last.")


class Placement(Model):
    """Why the pool's instances are where they are: the ranking its last placement used."""

    strategy: str = Field(description="spec.placementStrategy at that placement.")
    time: datetime | None = Field(None, description="When new slots were last placed.")
    message: str = Field("", description="Where new slots go, and why.")
    offerings: list[PlacedOffering] = Field(
        default_factory=list, description="The pool's zone x type offerings, best first."
    )


class SpotpoolStatus(Model):
    size: int = Field(0, description="Instances that exist (the article's field).")
    instances: list[Instance] = Field(default_factory=list, description="The pool's instances.")
    conditions: list[Condition] = Field(default_factory=list, description="Ready etc.")
    replicas: int = Field(0, description="Desired count the pool converges to.")
    ready_replicas: int = Field(0, description="Instances that are RUNNING.")
    selector: str = Field("", description="Label selector for the scale subresource.")
    observed_generation: int | None = Field(None, description="Last spec generation acted on.")
    phase: Phase | None = Field(None, description="Summary of the pool's state.")
    stack: StackStatus | None = None
    reclaims: Reclaims = Field(default_factory=Reclaims)
    surges: list[Surge] = Field(
        default_factory=list,
        description="Replacements started on a termination notice; each takes its slot when "
        "the cloud takes the slot's instance.",
    )
    notices: Notices = Field(default_factory=Notices)
    placement: Placement | None = Field(
        None, description="Why the instances are where they are (the last placement's ranking)."
    )
    on_demand_replicas: int = Field(
        0, description="Instances running on-demand (POSTPAID_BY_HOUR): a spot pool's fallbacks."
    )
    hourly_cost: float | None = Field(
        None,
        ge=0,
        description="What the pool's instances cost an hour now: the sum of their prices "
        "(the cloud's currency; unset while a price is unknown).",
    )
    on_demand_hourly_cost: float | None = Field(
        None,
        ge=0,
        description="What the same instances would cost an hour on demand: hourlyCost's "
        "comparison (the savings are the difference).",
    )
    writer: StatusWriter | None = Field(
        None, description="The replica that wrote this status, with its shard Lease's token."
    )
    drift: list[InstanceDrift] = Field(
        default_factory=list,
        description="Instances the last full refresh found changed outside the operator, with "
        "the fields (what the spec sets, what the cloud has); see spec.driftPolicy.",
    )
    nodes: list[NodeSlot] = Field(
        default_factory=list,
        description="With spec.nodes: which node holds each slot, and whether it is Ready.",
    )
