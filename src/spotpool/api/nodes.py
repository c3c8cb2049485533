"""A pool whose instances are nodes of this cluster (spec.nodes): the spec, the status of each
slot's node, and the rules that tie a Node to its instance (pure data, shared by the operator,
the local world's node stand-in and the docs; docs/nodes.md).

A Node belongs to an instance when its `spec.providerID` is `qcloud:///<zone>/<instance-id>`
(TKE's form) or it carries the label `spotpool.io/instance-id=<instance-id>` (the join passes it
with `--node-labels`, read from the metadata service).
"""

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

INSTANCE_LABEL = "spotpool.io/instance-id"
PROVIDER_PREFIX = "qcloud:///"
# In the local world, user data holding this line joins its instance as a Node (the stand-in).
JOIN_MARK = "# spotpool:join-node"
# A pod carrying one of these annotations set to "true" is not evicted by a voluntary drain.
DO_NOT_DISRUPT = ("karpenter.sh/do-not-disrupt", "spotpool.io/do-not-disrupt")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
LABEL_KEY = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class NodeTaint(_Model):
    key: str = Field(pattern=LABEL_KEY, max_length=316, description="The taint's key.")
    value: str = Field("", pattern=LABEL_VALUE, max_length=63, description="The taint's value.")
    effect: TaintEffect = Field(description="NoSchedule, PreferNoSchedule or NoExecute.")


class NodesSpec(_Model):
    """The pool's instances join this cluster as nodes: the operator finds each one's Node,
    labels and taints it, drains it before a voluntary termination or a notice's reclaim, and
    deletes it at once when the cloud takes the instance without notice."""

    labels: dict[str, str] = Field(
        default_factory=dict,
        max_length=64,
        description="Labels the operator writes on every node of the pool.",
    )
    taints: list[NodeTaint] = Field(
        default_factory=list,
        max_length=32,
        description="Taints the operator writes on every node of the pool (its own: a taint "
        "of the same key and effect is replaced).",
    )
    ready_timeout_seconds: int = Field(
        300,
        ge=30,
        le=3600,
        description="Seconds an instance has, from RUNNING, for its Node to register and be "
        "Ready; after that the instance is replaced like a failed launch.",
    )
    drain_timeout_seconds: int = Field(
        120,
        ge=0,
        le=3600,
        description="Seconds a voluntary drain (scale-down, rollout, drift correction, pool "
        "deletion) may take before the instance is terminated anyway; a notice's drain ends "
        "at the termination time.",
    )


class NodeSlot(_Model):
    """Which node holds a slot, and whether it is Ready."""

    slot: int | None = Field(None, description="The pool's slot.")
    instance_id: str = Field(description="The slot's instance (ins-...).")
    node: str | None = Field(None, description="Its Node's name (unset: not registered yet).")
    ready: bool = Field(False, description="The Node's Ready condition is True.")
    cordoned: bool = Field(False, description="The Node is unschedulable (being drained).")


def provider_id(zone: str, instance_id: str) -> str:
    return f"{PROVIDER_PREFIX}{zone}/{instance_id}"


def instance_of(node: dict[str, Any]) -> str | None:
    """The instance id a Node names (its providerID, else the join's label), or None."""
    provider = str((node.get("spec") or {}).get("providerID") or "")
    if provider.startswith(PROVIDER_PREFIX):
        last = provider.rsplit("/", 1)[-1]
        if last.startswith("ins-"):
            return last
    labels = (node.get("metadata") or {}).get("labels") or {}
    value = labels.get(INSTANCE_LABEL)
    return str(value) if value else None


def is_ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def joins(user_data: str | None) -> bool:
    """Whether user data asks the local world's stand-in to join its instance as a Node."""
    return any(line.strip() == JOIN_MARK for line in (user_data or "").splitlines())
