"""The Kubernetes API calls kopf does not make for us: reading Secrets and writing status.

kopf watches and patches with its own client; these two go through the official Kubernetes
client, configured the same way (in-cluster service account, else KUBECONFIG). The calls are
blocking: the reconciler runs them in threads.
"""

import base64
import json
import logging
import os
from collections.abc import Mapping
from typing import Any, Protocol, cast

import kubernetes

from spotpool.api.spec import GROUP, PLURAL, VERSION
from spotpool_operator.reporting import status_write
from spotpool_operator.reporting.status_write import Fence, Writer

log = logging.getLogger(__name__)


class SecretNotFound(Exception):
    """The named Secret does not exist (or this operator may not read it)."""


class Cluster(Protocol):
    def read_secret(self, namespace: str, name: str) -> dict[str, bytes]: ...

    def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], fence: Fence | None = None
    ) -> Writer | None:
        """Write the status (a merge patch); with a fence, as its shard holder, only over the
        writer it expects or an older holder's write (status_write.py). Returns the writer
        stored (None when unknown)."""
        ...


class KubeCluster:
    def __init__(self, kubeconfig: str | None = None) -> None:
        """In a pod its service account; else `kubeconfig`, or KUBECONFIG / ~/.kube/config."""
        client_config = kubernetes.client.Configuration()
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=client_config
            )
        else:
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig or os.environ.get("KUBECONFIG"),
                client_configuration=client_config,
            )
        self._api = kubernetes.client.ApiClient(client_config)
        self._core = kubernetes.client.CoreV1Api(self._api)
        self._custom = kubernetes.client.CustomObjectsApi(self._api)

    def core(self) -> Any:
        """The core API (Events posted outside kopf's handlers), on the same connection."""
        return self._core

    def coordination(self) -> Any:
        """The Leases API, on the same connection settings."""
        return kubernetes.client.CoordinationV1Api(self._api)

    def pool_uids(self, candidates: Mapping[str, str | None]) -> set[str] | None:
        """Which of `candidates` (uid -> "namespace/name") are the uid of a Spotpool that exists
        now: one list of the whole cluster; where that is not allowed (an install that serves
        some namespaces), one read per candidate. None when the listing failed or is partial
        — the API server failing, the resource type not served (a 404 that is not a Spotpool's
        NotFound: a CRD version change) — so that every pool counts as alive. A candidate
        that cannot be read (403) counts as existing: nothing is ever swept on a guess."""
        try:
            listed = cast(
                dict[str, Any],
                self._custom.list_cluster_custom_object(
                    GROUP, VERSION, PLURAL, _request_timeout=60
                ),
            )
            return {str(item["metadata"]["uid"]) for item in listed.get("items") or []}
        except kubernetes.client.ApiException as error:
            if error.status != 403:
                log.warning("Spotpools not listed (%s): every pool counts as alive", error.status)
                return None
        except Exception as error:
            log.warning("Spotpools not listed (%s): every pool counts as alive", error)
            return None
        alive = set()
        for uid, pool in candidates.items():
            namespace, _, name = (pool or "").partition("/")
            if not (namespace and name):
                alive.add(uid)  # no name to read it by
                continue
            try:
                found = cast(
                    dict[str, Any],
                    self._custom.get_namespaced_custom_object(
                        GROUP, VERSION, namespace, PLURAL, name, _request_timeout=30
                    ),
                )
            except kubernetes.client.ApiException as error:
                if error.status == 404 and not _pool_not_found(error, name):
                    log.warning(
                        "Spotpool %s/%s: a 404 for the resource type (%s/%s not served?): "
                        "every pool counts as alive", namespace, name, GROUP, VERSION,
                    )  # fmt: skip
                    return None
                if error.status != 404:
                    alive.add(uid)
                continue
            except Exception as error:
                log.warning("Spotpool %s/%s not read (%s): every pool counts as alive",
                            namespace, name, error)  # fmt: skip
                return None
            if found["metadata"]["uid"] == uid:  # (same name, another uid: this one is gone)
                alive.add(uid)
        return alive

    def cluster_uid(self) -> str:
        """The cluster's identity: the kube-system Namespace's uid (made with the cluster,
        kept for its life; a cluster rebuilt gets another)."""
        metadata = self._core.read_namespace("kube-system", _request_timeout=30).metadata
        if metadata is None or not metadata.uid:
            raise ValueError("the kube-system Namespace has no uid")
        return str(metadata.uid)

    def read_secret(self, namespace: str, name: str) -> dict[str, bytes]:
        try:
            secret = self._core.read_namespaced_secret(name, namespace, _request_timeout=30)
        except kubernetes.client.ApiException as error:
            if error.status in (403, 404):
                raise SecretNotFound(
                    f"Secret {namespace}/{name} "
                    + ("not found" if error.status == 404 else "is not readable by the operator")
                ) from None
            raise
        return {key: base64.b64decode(value) for key, value in (secret.data or {}).items()}

    def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], fence: Fence | None = None
    ) -> Writer | None:
        try:
            if fence is not None:
                return status_write.write(self._custom, namespace, name, status, fence)
            self._custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                {"status": status},
                _content_type="application/merge-patch+json",
                _request_timeout=30,
            )
        except kubernetes.client.ApiException as error:
            if error.status == 404:  # deleted meanwhile: nothing left to report on
                log.info("Spotpool %s/%s is gone; status not written", namespace, name)
                return fence.expected if fence else None
            raise
        return None


def _pool_not_found(error: Any, name: str) -> bool:
    """The 404 is the API server's NotFound for this Spotpool (a Status naming it), not a 404
    for the resource type (a group or version not served: a page not found)."""
    try:
        body = json.loads(error.body or "")
    except (TypeError, ValueError):
        return False
    details = body.get("details") or {} if isinstance(body, dict) else {}
    return (
        body.get("kind") == "Status"
        and body.get("reason") == "NotFound"
        and details.get("name") == name
        and details.get("kind") == PLURAL
    )
