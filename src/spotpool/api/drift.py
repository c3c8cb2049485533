"""Drift: a managed instance changed outside the operator (in the console, by a script), as a
full refresh finds it. Pure data, shared by the engine (which finds it), the operator (status,
condition, Events), the PR preview and `spotpool stacks show`."""

from pydantic import Field

from spotpool.api.spec import Model


class FieldDrift(Model):
    """One field of an instance that differs from what the pool's stack sets."""

    field: str = Field(description="instanceName, securityGroups, tags.<key> or running.")
    desired: str | None = Field(None, description="What the stack sets (null: not set).")
    actual: str | None = Field(None, description="What the cloud has (null: not there).")

    def describe(self) -> str:
        return f"{self.field} {_shown(self.desired)} -> {_shown(self.actual)}"


class InstanceDrift(Model):
    """A managed instance whose fields differ from what the pool's stack sets."""

    slot: int = Field(description="The slot the instance fills.")
    instance_id: str = Field(description="The instance (ins-...).")
    fields: list[FieldDrift] = Field(description="What differs: desired and found.")

    def describe(self) -> str:
        changed = "; ".join(f.describe() for f in self.fields)
        return f"slot {self.slot} ({self.instance_id}): {changed}"


def describe_all(drift: list[InstanceDrift], limit: int = 900) -> str:
    """One line for a condition message or an Event (bounded: an Event note is short)."""
    text = " | ".join(d.describe() for d in drift)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _shown(value: str | None) -> str:
    return "(none)" if value is None else repr(value)
