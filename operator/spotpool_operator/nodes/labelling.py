"""The pool's labels and taints on its nodes (spec.nodes.labels, .taints): a patch only when a
node lacks some, the node's other labels and taints left as they are."""

from typing import Any

from spotpool.api.nodes import NodesSpec


def wanted_patch(node: dict[str, Any], spec: NodesSpec) -> dict[str, Any] | None:
    """The merge patch that gives `node` the pool's labels and taints, None when it has them.
    A taint of the pool's replaces the node's taint of the same key and effect."""
    patch: dict[str, Any] = {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    missing = {k: v for k, v in spec.labels.items() if labels.get(k) != v}
    if missing:
        patch["metadata"] = {"labels": missing}
    taints = list((node.get("spec") or {}).get("taints") or [])
    ours = [
        {"key": t.key, **({"value": t.value} if t.value else {}), "effect": t.effect.value}
        for t in spec.taints
    ]
    mine = {(t["key"], t["effect"]) for t in ours}
    kept = [t for t in taints if (t.get("key"), t.get("effect")) not in mine]
    merged = kept + ours
    if _comparable(merged) != _comparable(taints):
        patch["spec"] = {"taints": merged}  # a list: replaced whole by a merge patch
        # ... so only over the version read: a taint a controller added meanwhile is not lost
        version = (node.get("metadata") or {}).get("resourceVersion")
        if version:
            patch.setdefault("metadata", {})["resourceVersion"] = version
    return patch or None


def _comparable(taints: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return sorted((t.get("key", ""), t.get("value") or "", t.get("effect", "")) for t in taints)
