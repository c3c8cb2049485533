"""What each engine operation returns: typed, small, and free of secrets."""

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

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
    diff: str = Field("", description="preview: the engine's diff text")
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
