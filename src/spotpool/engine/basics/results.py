"""What each engine operation returns: typed, small, and free of secrets."""

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from spotpool.api.drift import InstanceDrift
from spotpool.api.status import Changes


class OperationKind(StrEnum):
    UP = "up"
    REFRESH = "refresh"
    PREVIEW = "preview"
    DESTROY = "destroy"


class SlotOutput(BaseModel):
    """One instance of the pool, as the stack program exports it."""

    slot: int
    instance_id: str = Field(alias="instanceId")
    public_ip: str | None = Field(None, alias="publicIp")
    private_ip: str | None = Field(None, alias="privateIp")
    zone: str | None = None
    instance_type: str | None = Field(None, alias="instanceType")
    state: str | None = None
    charge_type: str | None = Field(None, alias="chargeType")
    nonce: str | None = None  # the instance's generation (its notice token is bound to it)

    model_config = {"populate_by_name": True}


class OperationResult(BaseModel):
    kind: OperationKind
    stack: str
    changes: Changes = Field(default_factory=Changes)
    instances: list[SlotOutput] = Field(default_factory=list)
    seconds: float
    gone_slots: list[int] = Field(
        default_factory=list, description="refresh: slots whose instance the cloud no longer has"
    )
    orphan_slots: list[int] = Field(
        default_factory=list,
        description="refresh: free slots holding an orphaned instance, which the next up adopts",
    )
    drift: list[InstanceDrift] = Field(
        default_factory=list,
        description="refresh: instances changed outside the operator (what the next up restores)",
    )
    surges: list[SlotOutput] = Field(
        default_factory=list,
        description="up: instances made on a termination notice beside their slot's instance",
    )
    diff: str = Field("", description="preview: the engine's diff text")
    instance_changes: Changes | None = Field(
        None, description="preview: cloud instances by operation (not every Pulumi resource)"
    )
    replaced_slots: list[int] = Field(
        default_factory=list, description="preview: slots whose instance the change replaces"
    )
    recovered: list[str] = Field(
        default_factory=list, description="what was repaired before the operation ran"
    )


def changes_from_summary(summary: Mapping[Any, int] | None) -> Changes:
    """Counts by operation; keys may be OpType members or their string values."""
    counts = {str(getattr(op, "value", op)): n for op, n in (summary or {}).items()}
    return Changes(
        create=counts.get("create", 0),
        update=counts.get("update", 0),
        replace=counts.get("replace", 0),
        delete=counts.get("delete", 0),
        same=counts.get("same", 0),
    )


REPLACING = {"replace", "create-replacement", "delete-replaced", "discard-replaced"}


def changes_by_resource(steps: Iterable[tuple[str, str]]) -> Changes:
    """Counts of resources by what happens to each, from its (urn, op) steps: a replacement
    is several steps of one resource, counted once."""
    ops: dict[str, set[str]] = {}
    for urn, op in steps:
        ops.setdefault(urn, set()).add(op)
    counts = dict.fromkeys(("create", "update", "replace", "delete", "same"), 0)
    for seen in ops.values():
        if seen & REPLACING:
            counts["replace"] += 1
        else:
            kind = next((op for op in ("create", "delete", "update", "same") if op in seen), None)
            if kind is not None:
                counts[kind] += 1
    return Changes(**counts)
