"""The few core/v1 calls the node jobs make, as plain JSON (the official client's models are
not needed, and dicts are what the api module's rules read). Blocking: run them in threads."""

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import kubernetes

TIMEOUT = 30


class NodeApi:
    """Nodes and the pods on them, through a kubernetes.client.CoreV1Api."""

    def __init__(self, core: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self.core, self.clock = core, clock
        self._lock = threading.Lock()
        self._listed: tuple[float, list[dict[str, Any]]] | None = None

    def nodes(self, max_age: float = 0.0) -> list[dict[str, Any]]:
        """The cluster's Nodes; with `max_age`, a listing that recent serves again: every
        pool's 5 s look shares one list a window, not one list a pool (a drain lists fresh)."""
        with self._lock:
            listed = self._listed
            if max_age > 0 and listed is not None and self.clock() - listed[0] < max_age:
                return listed[1]
            started = self.clock()
            response = self.core.list_node(_preload_content=False, _request_timeout=TIMEOUT)
            items = list(json.loads(response.data).get("items") or [])
            self._listed = (started, items)
            return items

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        response = self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}", _preload_content=False,
            _request_timeout=TIMEOUT,
        )  # fmt: skip
        return list(json.loads(response.data).get("items") or [])

    def patch_node(self, node: str, patch: dict[str, Any]) -> None:
        self.core.patch_node(node, patch, _request_timeout=TIMEOUT)

    def delete_node(self, node: str) -> bool:
        """False when it was gone already."""
        try:
            self.core.delete_node(node, _request_timeout=TIMEOUT)
        except kubernetes.client.ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    def evict(self, namespace: str, name: str, grace: int | None) -> int:
        """Ask the Eviction API (policy/v1) to evict a pod: 201 evicted, 404 gone, 429 refused
        for now (a PodDisruptionBudget), another code refused (a 500: several PDBs)."""
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if grace is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace}
        try:
            self.core.create_namespaced_pod_eviction(
                name, namespace, body, _request_timeout=TIMEOUT
            )
        except kubernetes.client.ApiException as error:
            return int(error.status or 500)
        return 201
