"""Which Node is which instance's (its providerID, else the join's label: api/nodes.py), and
the pool's status.nodes from that."""

from collections.abc import Iterable
from typing import Any

from spotpool.api.nodes import NodeSlot, instance_of, is_ready
from spotpool.api.status import Instance


def by_instance(nodes: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """instance id -> its Node; a Node being deleted is no instance's any more."""
    found: dict[str, dict[str, Any]] = {}
    for node in nodes:
        instance = instance_of(node)
        if instance and not (node.get("metadata") or {}).get("deletionTimestamp"):
            found[instance] = node
    return found


def name_of(node: dict[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


def slot_nodes(instances: Iterable[Instance], found: dict[str, dict[str, Any]]) -> list[NodeSlot]:
    """status.nodes: one row per instance, in slot order, with its Node when registered."""
    rows = []
    for instance in sorted(instances, key=lambda i: (i.slot is None, i.slot or 0)):
        node = found.get(instance.instance_id)
        rows.append(
            NodeSlot(
                slot=instance.slot,
                instance_id=instance.instance_id,
                node=name_of(node) if node else None,
                ready=bool(node) and is_ready(node or {}),
                cordoned=bool(node and (node.get("spec") or {}).get("unschedulable")),
            )
        )
    return rows


def pod_count(pods: Iterable[dict[str, Any]]) -> int:
    """Pods that would have to move (running or waiting to), for choosing the emptiest node."""
    return sum(
        1 for pod in pods if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    )
