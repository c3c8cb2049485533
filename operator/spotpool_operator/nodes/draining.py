"""Drain a node before its instance goes: cordon it, then evict its pods through the Eviction
API (policy/v1: a PodDisruptionBudget that allows no disruption now answers 429, and the
eviction is asked again until the deadline), each pod's grace capped by the time left. Pods of
a DaemonSet and mirror pods (a static pod's) stay, as `kubectl drain` leaves them; finished pods
need no move. In a voluntary drain a pod annotated do-not-disrupt (karpenter.sh/ or
spotpool.io/do-not-disrupt: "true") is not evicted: the drain waits for it to end by itself
until the deadline (Karpenter's rule: the annotation holds a voluntary disruption, up to a
grace). Blocking: run it in a thread."""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spotpool.api.nodes import DO_NOT_DISRUPT, MIRROR_ANNOTATION
from spotpool_operator.nodes.kubejson import NodeApi

DEFAULT_GRACE = 30  # a pod's terminationGracePeriodSeconds when it sets none (the API's default)
POLL = 1.0  # seconds between rounds of evictions and looks


@dataclass
class Drained:
    """What a drain did."""

    node: str
    evicted: set[str] = field(default_factory=set)  # namespace/name of each pod evicted
    refused: int = 0  # evictions a PDB refused for now (429), asked again
    left: list[str] = field(default_factory=list)  # pods still on the node at the end
    protected: list[str] = field(default_factory=list)  # do-not-disrupt pods not evicted
    seconds: float = 0.0
    timed_out: bool = False


def key(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def stays(pod: dict[str, Any]) -> bool:
    """A pod no drain moves: a DaemonSet's, a mirror pod, or one that has finished."""
    meta = pod.get("metadata") or {}
    if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []):
        return True
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return True
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def do_not_disrupt(pod: dict[str, Any]) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return any(str(annotations.get(name, "")).lower() == "true" for name in DO_NOT_DISRUPT)


def grace_of(pod: dict[str, Any], left: float) -> int:
    """The pod's own grace, capped by the seconds left before the deadline."""
    own = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    own = DEFAULT_GRACE if own is None else int(own)
    return max(0, min(own, int(left)))


def cordon(api: NodeApi, node: str) -> None:
    api.patch_node(node, {"spec": {"unschedulable": True}})


def drain(
    api: NodeApi,
    node: str,
    deadline: float,
    voluntary: bool,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Drained:
    """Cordon `node` and evict its pods until none that must move is left, or `deadline` (a
    `clock` time) passes. Evicted pods count once each, however many rounds they took."""
    started = clock()
    result = Drained(node)
    cordon(api, node)
    while True:
        moving = [pod for pod in api.pods_on(node) if not stays(pod)]
        result.protected = sorted(key(p) for p in moving if voluntary and do_not_disrupt(p))
        for pod in moving:
            name = key(pod)
            if name in result.protected or (pod.get("metadata") or {}).get("deletionTimestamp"):
                continue  # held by its annotation, or on its way out already
            meta = pod["metadata"]
            code = api.evict(meta["namespace"], meta["name"], grace_of(pod, deadline - clock()))
            if code == 201:
                result.evicted.add(name)
            elif code != 404:  # 429: a PDB allows none now; asked again next round
                result.refused += 1
        result.left = sorted(key(p) for p in moving)
        if not moving:
            break
        if clock() >= deadline:
            result.timed_out = True
            break
        sleep(min(POLL, max(0.0, deadline - clock())))
        result.left = sorted(key(p) for p in api.pods_on(node) if not stays(p))
        if not result.left:
            break
    result.seconds = round(clock() - started, 2)
    return result


def clear_gone(api: NodeApi, node: str) -> tuple[bool, int]:
    """The cloud took the node's instance without notice: delete the Node at once and evict
    its pods with no grace (nothing runs them any more), so their controllers make new ones now
    rather than after the node monitor's grace and the 300 s toleration. A PDB's refusal is
    left to the pod garbage collector. Returns (the Node was there, pods evicted)."""
    pods = [pod for pod in api.pods_on(node) if not stays(pod)]
    existed = api.delete_node(node)
    evicted = 0
    for pod in pods:
        meta = pod["metadata"]
        if api.evict(meta["namespace"], meta["name"], 0) == 201:
            evicted += 1
    return existed, evicted
