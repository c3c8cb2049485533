"""Each SpotpoolAccessPolicy's status: what the pools of the namespaces it selects use (pools,
instances, GPUs, hourly cost, pools held by a limit), so `kubectl get spotpoolaccesspolicies`
shows use against the limits. Written every INTERVAL by one replica (the holder of shard 0),
only when it changed, as a merge patch that leaves the ledger (status.reservations and
status.reserved, written by every replica before a launch: ledgers.py) as it is."""

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from spotpool.api.access import Use, policy_status
from spotpool_operator.reporting.kube import KubeCluster, PoolUse

INTERVAL = 10.0
log = logging.getLogger(__name__)


def pool_use(pool: PoolUse) -> tuple[Use, bool]:
    """A pool's instances, GPUs and cost now, and whether a limit holds it."""
    instances = pool.status.get("instances") or []
    gpus = sum(int(i.get("gpus") or 0) for i in instances)  # the cloud's count, when known
    cost = float(pool.status.get("hourlyCost") or 0.0)
    held = any(
        c.get("type") == "Limited" and c.get("status") == "True"
        for c in pool.status.get("conditions") or []
    )
    return Use(len(instances), gpus, cost), held


def write_once(cluster: KubeCluster, namespaces: list[str] | None, written: dict[str, Any]) -> None:
    """Compute every policy's status and patch those that changed since `written`."""
    policies = cluster.access_policies()
    if not policies:
        return
    pools = [(ns, *pool_use(pool)) for ns, pool in cluster.all_pools(namespaces)]
    labels = {ns: cluster.namespace_labels(ns) for ns in {ns for ns, _, _ in pools}}
    for policy in policies:
        found = policy_status(policy, labels, pools).model_copy(update={"problem": policy.problem})
        status = found.model_dump(mode="json", by_alias=True, exclude={"reserved", "reservations"})
        if written.get(policy.name) == status:
            continue
        cluster.patch_policy_status(policy.name, status)
        written[policy.name] = status


async def keep_writing(
    cluster: KubeCluster, namespaces: list[str] | None, mine: Callable[[], bool]
) -> None:
    """Write the policies' status every INTERVAL while `mine()` (this replica's turn)."""
    written: dict[str, Any] = {}
    while True:
        if mine():
            try:
                await asyncio.to_thread(write_once, cluster, namespaces, written)
            except Exception as error:  # the next round tries again
                log.warning("writing the access policies' status failed: %s", error)
                written.clear()
        else:
            written.clear()
        await asyncio.sleep(INTERVAL)
