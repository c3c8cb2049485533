"""The Kubernetes API calls kopf does not make for us: reading Secrets, access policies and
namespaces' labels, and writing status.

kopf watches and patches with its own client; these two go through the official Kubernetes
client, configured the same way (in-cluster service account, else KUBECONFIG). The calls are
blocking: the reconciler runs them in threads.
"""

import base64
import copy
import fnmatch
import json
import logging
import os
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import kubernetes
from pydantic import ValidationError

from spotpool.api.access import (
    ACCESS_PLURAL,
    AccessPolicySpec,
    LabelSelector,
    NamedPolicy,
    Namespaces,
    consents,
)
from spotpool.api.reservations import Reservation
from spotpool.api.spec import GROUP, PLURAL, VERSION
from spotpool_operator.reporting import ledgers, status_write
from spotpool_operator.reporting.ledgers import Ledger
from spotpool_operator.reporting.status_write import Fence, Writer

log = logging.getLogger(__name__)


class SecretNotFound(Exception):
    """The named Secret does not exist (or this operator may not read it)."""


@dataclass(frozen=True)
class SecretRead:
    """A Secret's data, and whether it opts in to Spotpool (access.CONSENT_KEY)."""

    data: dict[str, bytes]
    consents: bool = False


@dataclass(frozen=True)
class PoolUse:
    """What another pool of a namespace holds, from its last written status."""

    uid: str
    name: str
    status: Mapping[str, Any] = field(default_factory=dict)
    instance_types: list[str] = field(default_factory=list)


NO_POLICY_RIGHTS = (
    "the operator may not read SpotpoolAccessPolicies or namespaces: apply this release's RBAC "
    "(the chart's rbac.yaml; docs/deploy.md, 'What the operator may do, and why')"
)
POLICY_TTL = 5.0  # policies and namespace labels are read again after this many seconds


class Cluster(Protocol):
    def read_secret(self, namespace: str, name: str) -> SecretRead: ...

    def access_policies(self) -> list[NamedPolicy]:
        """Every SpotpoolAccessPolicy (none when the CRD is not installed)."""
        ...

    def fresh_access_policies(self) -> list[NamedPolicy]:
        """`access_policies` read now, not from the cache (a reservation decides on what
        exists now: a policy created a second ago limits already)."""
        ...

    def namespace_labels(self, namespace: str) -> dict[str, str]: ...

    def pools_in(self, namespace: str) -> list[PoolUse]:
        """The Spotpools of a namespace, as their status says (for its limits)."""
        ...

    def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], fence: Fence | None = None
    ) -> Writer | None:
        """Write the status (a merge patch); with a fence, as its shard holder, only over the
        writer it expects or an older holder's write (status_write.py). Returns the writer
        stored (None when unknown)."""
        ...

    def read_ledger(self, policy: str) -> Ledger | None:
        """A policy's limits and reservations as they are now (None: the policy is gone)."""
        ...

    def write_ledger(self, ledger: Ledger, changes: dict[str, Reservation | None]) -> bool:
        """Set or remove reservations over exactly the version read (False: it changed)."""
        ...


SHARED_CONNECTIONS = 32  # kept open: the engine threads, the sweeps, the policies' reads
LEASE_CONNECTIONS = 20  # the renewal threads (8), a round's requests (8), the watch, spare


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
        # The engine threads' status writes come in bursts (a storm): connections beyond the
        # pool are opened and thrown away, each a new TLS handshake on a starved CPU.
        client_config.connection_pool_maxsize = SHARED_CONNECTIONS
        self._config = client_config
        self._api = kubernetes.client.ApiClient(client_config)
        self._core = kubernetes.client.CoreV1Api(self._api)
        self._custom = kubernetes.client.CustomObjectsApi(self._api)
        self._cached: dict[str, tuple[float, Any]] = {}
        self._guard = threading.Lock()

    def _cache(self, key: str, read: Any) -> Any:
        """`read()`, kept POLICY_TTL seconds (every pool's run asks; the answer rarely moves)."""
        now = time.monotonic()
        with self._guard:
            held = self._cached.get(key)
        if held is not None and now - held[0] < POLICY_TTL:
            return held[1]
        value = read()
        with self._guard:
            self._cached[key] = (now, value)
        return value

    def access_policies(self) -> list[NamedPolicy]:
        return cast(list[NamedPolicy], self._cache("policies", self._read_policies))

    def fresh_access_policies(self) -> list[NamedPolicy]:
        policies = self._read_policies()
        with self._guard:
            self._cached["policies"] = (time.monotonic(), policies)
        return policies

    def _read_policies(self) -> list[NamedPolicy]:
        try:
            listed = cast(
                dict[str, Any],
                self._custom.list_cluster_custom_object(
                    GROUP, VERSION, ACCESS_PLURAL, _request_timeout=30
                ),
            )
        except kubernetes.client.ApiException as error:
            if error.status == 404:  # the CRD is not installed: no policy, the defaults
                return []
            if error.status == 403:
                raise PermissionError(NO_POLICY_RIGHTS) from None
            raise
        policies = []
        for item in listed.get("items") or []:
            name = str(item["metadata"]["name"])
            try:
                spec = AccessPolicySpec.model_validate(item.get("spec") or {})
            except ValidationError as error:
                # The API server checked it against the CRD's schema; an older operator may
                # not know a newer field, which may refuse or limit. It still selects what it
                # selected (every namespace, when that is not understood either): it refuses
                # every pool there and holds what they run (access.not_understood).
                log.warning("SpotpoolAccessPolicy %s not understood: %s", name, error)
                problem = ledgers.parse(item).problem or "not understood"
                raw = (item.get("spec") or {}).get("namespaces") or {}
                try:
                    chosen = Namespaces.model_validate(raw)
                except ValidationError:
                    chosen = Namespaces(selector=LabelSelector())
                spec = AccessPolicySpec(namespaces=chosen)
                policies.append(NamedPolicy(name, spec, problem))
                continue
            policies.append(NamedPolicy(name, spec))
        return policies

    def read_ledger(self, policy: str) -> Ledger | None:
        return ledgers.read(self._custom, policy)

    def write_ledger(self, ledger: Ledger, changes: dict[str, Reservation | None]) -> bool:
        return ledgers.write(self._custom, ledger, changes)

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        def read() -> dict[str, str]:
            try:
                found: Any = self._core.read_namespace(namespace, _request_timeout=30)
            except kubernetes.client.ApiException as error:
                if error.status == 403:
                    raise PermissionError(NO_POLICY_RIGHTS) from None
                raise
            return dict(found.metadata.labels or {})

        return cast(dict[str, str], self._cache(f"namespace:{namespace}", read))

    def pools_in(self, namespace: str) -> list[PoolUse]:
        listed = cast(
            dict[str, Any],
            self._custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, _request_timeout=30
            ),
        )
        return [_pool_use(item) for item in listed.get("items") or []]

    def all_pools(self, namespaces: list[str] | None) -> list[tuple[str, PoolUse]]:
        """(namespace, pool) of every Spotpool the operator serves: of the cluster, or of the
        namespaces `namespaces` names (exact names or kopf's glob patterns). One list of the
        whole cluster; where that is not allowed, one per exactly named namespace."""
        try:
            listed = cast(
                dict[str, Any],
                self._custom.list_cluster_custom_object(
                    GROUP, VERSION, PLURAL, _request_timeout=60
                ),
            )
            items = listed.get("items") or []
        except kubernetes.client.ApiException as error:
            if error.status != 403 or namespaces is None:
                raise
            exact = [n for n in namespaces if not any(c in n for c in "*?[!")]
            items = [item for ns in exact for item in self._items_in(ns)]
        found = [(str(i["metadata"]["namespace"]), _pool_use(i)) for i in items]
        if namespaces is None:
            return found
        return [(ns, p) for ns, p in found if any(fnmatch.fnmatchcase(ns, n) for n in namespaces)]

    def _items_in(self, namespace: str) -> list[dict[str, Any]]:
        listed: Any = self._custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, _request_timeout=30
        )
        return cast(list[dict[str, Any]], listed.get("items") or [])

    def patch_policy_status(self, name: str, status: dict[str, Any]) -> None:
        self._custom.patch_cluster_custom_object_status(
            GROUP,
            VERSION,
            ACCESS_PLURAL,
            name,
            {"status": status},
            _content_type="application/merge-patch+json",
            _request_timeout=30,
        )

    def core(self) -> Any:
        """The core API (Events posted outside kopf's handlers), on the same connection."""
        return self._core

    def coordination(self) -> Any:
        """The Leases API, on the same settings but connections of its own: a renewal never
        waits behind a burst of status writes for a connection, nor pays a new handshake
        because that burst filled the shared pool (a lone replica at load 24 slipped there)."""
        config = copy.deepcopy(self._config)
        config.connection_pool_maxsize = LEASE_CONNECTIONS
        return kubernetes.client.CoordinationV1Api(kubernetes.client.ApiClient(config))

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

    def pool_names(self, names: Collection[str]) -> set[str] | None:
        """Which of `names` ("namespace/name") name a Spotpool now, whatever its uid: one read
        each (a pool re-created under a new uid is found by name). None when one cannot be
        read (a 403 or the API server failing): nothing is known then."""
        found = set()
        for pool in names:
            namespace, _, name = pool.partition("/")
            try:
                self._custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name, _request_timeout=30
                )
            except kubernetes.client.ApiException as error:
                if error.status == 404 and _pool_not_found(error, name):
                    continue
                return None
            except Exception:
                return None
            found.add(pool)
        return found

    def cluster_uid(self) -> str:
        """The cluster's identity: the kube-system Namespace's uid (made with the cluster,
        kept for its life; a cluster rebuilt gets another)."""
        metadata = self._core.read_namespace("kube-system", _request_timeout=30).metadata
        if metadata is None or not metadata.uid:
            raise ValueError("the kube-system Namespace has no uid")
        return str(metadata.uid)

    def read_secret(self, namespace: str, name: str) -> SecretRead:
        try:
            secret = self._core.read_namespaced_secret(name, namespace, _request_timeout=30)
        except kubernetes.client.ApiException as error:
            if error.status in (403, 404):
                raise SecretNotFound(
                    f"Secret {namespace}/{name} "
                    + ("not found" if error.status == 404 else "is not readable by the operator")
                ) from None
            raise
        meta: Any = secret.metadata
        data = {key: base64.b64decode(value) for key, value in (secret.data or {}).items()}
        return SecretRead(data, consents(meta.labels or {}, meta.annotations or {}))

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


def _pool_use(item: Mapping[str, Any]) -> PoolUse:
    spec = item.get("spec") or {}
    types = spec.get("instanceTypes") or [spec.get("instanceType") or ""]
    return PoolUse(
        uid=str(item["metadata"]["uid"]),
        name=str(item["metadata"]["name"]),
        status=item.get("status") or {},
        instance_types=[str(t) for t in types],
    )
