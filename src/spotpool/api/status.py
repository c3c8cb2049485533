"""What the operator reports back on a Spotpool: the article's fields plus Spotpool's."""

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from spotpool.api.spec import Model


class Phase(StrEnum):
    PENDING = "Pending"
    CONVERGING = "Converging"
    READY = "Ready"
    DEGRADED = "Degraded"
    PAUSED = "Paused"
    DELETING = "Deleting"


class Instance(Model):
    instance_id: str = Field(description="CVM instance id (ins-...).")
    public_ip: str | None = Field(None, description="First public IP, if any.")
    private_ip: str | None = Field(None, description="First private IP.")
    zone: str | None = Field(None, description="Availability zone.")
    instance_type: str | None = Field(None, description="CVM instance type.")
    state: str | None = Field(None, description="Instance state as the cloud reports it.")
    slot: int | None = Field(None, description="Slot of the pool this instance fills.")


class Condition(Model):
    """A metav1.Condition."""

    type: str = Field(description="Ready, Progressing or Degraded (or another condition type).")
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


class Reclaims(Model):
    total: int = Field(0, description="Spot instances the cloud reclaimed from this pool.")
    last_time: datetime | None = Field(None, description="When the last reclaim was found.")


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
