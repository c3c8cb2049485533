"""A stalled replica's status write never lands over the shard's new holder's (the real
kube-apiserver, the stalling proxy of test_fencing): A holds the shard, writes a status, its
connection stalls with a second write in flight; B takes the shard over and writes; the stall
ends and A's late request reaches the server — which refuses it (the JSON patch's test of
status.writer), so B's status stands."""

import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from spotpool_operator.replicas.shards import ShardLeases
from spotpool_operator.reporting.kube import KubeCluster
from spotpool_operator.reporting.status_write import Fence, StaleWrite

from spotpool.localworld.emulator import wait_until
from spotpool.localworld.kube import Kube
from spotpool.localworld.operator import pool_manifest
from spotpool.localworld.slow_proxy import StallProxy
from tests.e2e._support.leases import Running, coordination_api

pytestmark = pytest.mark.e2e
D = 6.0


def _stored(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    found = json.loads(kube.ok("-n", namespace, "get", "spotpool", name, "-o", "json"))
    return dict(found.get("status") or {})


def test_a_stalled_replicas_late_status_write_is_refused_after_a_takeover(
    lease_world: tuple[Kube, str, StallProxy, Path],
) -> None:
    kube, namespace, proxy, proxied = lease_world
    name = f"pool-{uuid.uuid4().hex[:6]}"
    kube.ok("-n", namespace, "apply", "-f", "-", stdin=json.dumps(pool_manifest(name)))
    uid = kube.ok("-n", namespace, "get", "spotpool", name, "-o", "jsonpath={.metadata.uid}")
    a_cluster = KubeCluster(str(proxied))
    b_cluster = KubeCluster(str(kube.kubeconfig))

    a = Running(ShardLeases(coordination_api(proxied), namespace, "sf", 1, D, hostname="pod-a"))
    b: Running | None = None
    try:
        wait_until(lambda: a.replica.serves(uid), "A to hold the shard", 30)
        mine = a.replica.writer(uid)
        serving_a = lambda: a.replica.serves(uid)  # noqa: E731
        reads: list[str] = []
        read = a_cluster._custom.get_namespaced_custom_object

        def counted(*args: Any, **kwargs: Any) -> Any:
            reads.append(args[-1])
            return read(*args, **kwargs)

        a_cluster._custom.get_namespaced_custom_object = counted  # type: ignore[method-assign]
        stored = a_cluster.patch_status(namespace, name, {"size": 1}, Fence(mine, None, serving_a))
        assert stored == mine
        assert reads == []  # a new pool's first status: one request, no read
        assert _stored(kube, namespace, name)["writer"] == mine

        # B joins; A's connection stalls with a write in flight
        b = Running(
            ShardLeases(coordination_api(kube.kubeconfig), namespace, "sf", 1, D, hostname="pod-b")
        )
        proxy.stalled.set()
        late: list[object] = []

        def write_late() -> None:
            try:
                late.append(
                    a_cluster.patch_status(
                        namespace, name, {"size": 111}, Fence(mine, mine, serving_a)
                    )
                )
            except Exception as error:
                late.append(error)

        writer = threading.Thread(target=write_late, daemon=True)
        writer.start()
        b_replica = b.replica
        wait_until(lambda: b_replica.serves(uid), "B to take the shard over", 4 * D)
        theirs = b.replica.writer(uid)
        assert theirs["token"] > mine["token"] and theirs["leaseUid"] == mine["leaseUid"]
        # B's first write expects no writer (its memory of the pool predates A's): the test
        # fails, B reads A's older writer and writes conditional on the resourceVersion
        serving_b = lambda: b_replica.serves(uid)  # noqa: E731
        stored = b_cluster.patch_status(
            namespace, name, {"size": 222}, Fence(theirs, None, serving_b)
        )
        assert stored == theirs
        stored = b_cluster.patch_status(
            namespace, name, {"size": 2}, Fence(theirs, stored, serving_b)
        )
        assert stored == theirs

        proxy.stalled.clear()  # A's late request reaches the server now
        writer.join(30)
        assert late and isinstance(late[0], StaleWrite), late
        assert late[0].seen == theirs
        status = _stored(kube, namespace, name)
        assert status["size"] == 2 and status["writer"] == theirs, status

        # and a replica that no longer serves the pool never writes over a stored writer
        with pytest.raises(StaleWrite):
            a_cluster.patch_status(namespace, name, {"size": 3}, Fence(mine, None, lambda: False))
        assert _stored(kube, namespace, name)["size"] == 2
    finally:
        proxy.stalled.clear()
        if b is not None:
            b.stop()
        a.stop()
