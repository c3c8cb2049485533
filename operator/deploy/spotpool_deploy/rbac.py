"""Least-privilege RBAC for the operator, from what it and kopf actually call.

- kopf lists, watches and merge-/JSON-patches Spotpools (finalizer, its annotations) and
  patches `spotpools/status`; the operator's own client patches the status too. `get` adds
  nothing `list` does not show, and spares a client that reads one pool a 403.
- Events: kopf POSTs core/v1 Events (the operator posts through kopf): `create` only.
- Secrets: the operator GETs the Secret a pool's credentialsSecretRef or
  loginSettings.passwordSecretRef names, in the pool's namespace: `get` only, no list/watch.
- kopf reads CustomResourceDefinitions (list/watch) to notice the resource appear or change.
- Serving some namespaces, kopf lists and watches namespaces (to match its namespace
  patterns); denied, it retries for about a minute with ERROR lines, then falls back to the
  exact names. Cluster-wide it never does, so only the namespaced install grants it.
- Leases (coordination.k8s.io), in its own namespace only: each replica keeps a membership
  Lease and holds shard Leases (get/create/update), lists them all to divide the shards, and
  deletes membership Leases of replicas long gone (and its own at shutdown).
- Not granted, because not used: peering objects (kopf runs with standalone=True),
  spotpools/scale, create/update/delete of anything else.
- The operator's own Secrets (the state passphrase, backend credentials) reach it as a volume
  and environment variables that the kubelet fills: it needs no API access to them.
"""

from typing import Any

from spotpool.api.spec import GROUP, PLURAL
from spotpool_deploy.config import InstallConfig
from spotpool_deploy.meta import cluster_name, metadata

RBAC = "rbac.authorization.k8s.io/v1"
LEASE_VERBS = ["get", "list", "create", "update", "delete"]


def rule(group: str, resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": [group], "resources": resources, "verbs": verbs}


def pool_rules() -> list[dict[str, Any]]:
    """What the operator does with Spotpools and what hangs off them, in their namespaces."""
    return [
        rule(GROUP, [PLURAL], ["get", "list", "watch", "patch"]),
        rule(GROUP, [f"{PLURAL}/status"], ["patch"]),
        rule("", ["events"], ["create"]),
        rule("", ["secrets"], ["get"]),
    ]


def scan_rules(config: InstallConfig) -> list[dict[str, Any]]:
    """kopf's scan of the cluster: read-only, cluster-scoped by nature."""
    rules = [rule("apiextensions.k8s.io", ["customresourcedefinitions"], ["get", "list", "watch"])]
    if not config.all_namespaces:
        rules.append(rule("", ["namespaces"], ["list", "watch"]))
    return rules


def service_account(config: InstallConfig) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            **metadata(config, config.name, config.namespace),
            **(
                {"annotations": dict(config.service_account.annotations)}
                if config.service_account.annotations
                else {}
            ),
        },
        "automountServiceAccountToken": True,
    }


def _subjects(config: InstallConfig) -> list[dict[str, str]]:
    return [{"kind": "ServiceAccount", "name": config.name, "namespace": config.namespace}]


def _cluster_role(config: InstallConfig, role: str, rules: list[dict[str, Any]]) -> list[Any]:
    name = cluster_name(config, role)
    return [
        {
            "apiVersion": RBAC,
            "kind": "ClusterRole",
            "metadata": metadata(config, name),
            "rules": rules,
        },
        {
            "apiVersion": RBAC,
            "kind": "ClusterRoleBinding",
            "metadata": metadata(config, name),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": _subjects(config),
        },
    ]


def _namespace_role(config: InstallConfig, namespace: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": RBAC,
            "kind": "Role",
            "metadata": metadata(config, config.name, namespace),
            "rules": pool_rules(),
        },
        {
            "apiVersion": RBAC,
            "kind": "RoleBinding",
            "metadata": metadata(config, config.name, namespace),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": config.name,
            },
            "subjects": _subjects(config),
        },
    ]


def _lease_role(config: InstallConfig) -> list[dict[str, Any]]:
    name = f"{config.name}-lease"
    return [
        {
            "apiVersion": RBAC,
            "kind": "Role",
            "metadata": metadata(config, name, config.namespace),
            "rules": [rule("coordination.k8s.io", ["leases"], LEASE_VERBS)],
        },
        {
            "apiVersion": RBAC,
            "kind": "RoleBinding",
            "metadata": metadata(config, name, config.namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": _subjects(config),
        },
    ]


def roles(config: InstallConfig) -> list[dict[str, Any]]:
    """Pools cluster-wide through one ClusterRole, or one Role per watched namespace; the
    Lease's Role in the operator's own namespace."""
    objects = _cluster_role(config, "scan", scan_rules(config)) + _lease_role(config)
    if config.all_namespaces:
        return objects + _cluster_role(config, "pools", pool_rules())
    for namespace in config.watch_namespaces:
        objects += _namespace_role(config, namespace)
    return objects
