"""The Kubernetes API calls kopf does not make for us: reading Secrets and writing status.

kopf watches and patches with its own client; these two go through the official Kubernetes
client, configured the same way (in-cluster service account, else KUBECONFIG). The calls are
blocking: the reconciler runs them in threads.
"""

import base64
import logging
import os
from typing import Any, Protocol

import kubernetes

from spotpool.api.spec import GROUP, PLURAL, VERSION

log = logging.getLogger(__name__)


class SecretNotFound(Exception):
    """The named Secret does not exist (or this operator may not read it)."""


class Cluster(Protocol):
    def read_secret(self, namespace: str, name: str) -> dict[str, bytes]: ...

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None: ...


class KubeCluster:
    def __init__(self) -> None:
        client_config = kubernetes.client.Configuration()
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=client_config
            )
        else:
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                client_configuration=client_config
            )
        self._api = kubernetes.client.ApiClient(client_config)
        self._core = kubernetes.client.CoreV1Api(self._api)
        self._custom = kubernetes.client.CustomObjectsApi(self._api)

    def coordination(self) -> Any:
        """The Leases API, on the same connection settings."""
        return kubernetes.client.CoordinationV1Api(self._api)

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

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        try:
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
                return
            raise
