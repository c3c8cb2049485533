"""Events fenced like status, against the real kube-apiserver (issue 33, path 7): replica A
serves a pool through a connection that then stalls; its shard Lease slips away and B takes the
shard over; A's fleet probe saw a reclaim meanwhile and A handles it. A must not post
`Reclaimed` for a pool it no longer serves (B reports now); before the stall its Events land.
The reconciler is the real one over a fake engine; its Events go to the API server through A's
own (stalling) connection, each on a thread of its own, as kopf's queue posts them."""

import json
import threading
import uuid
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from spotpool_operator.process.reconciler import Reconciler
from spotpool_operator.replicas.shards import ShardLeases
from spotpool_operator.reporting.metrics import Metrics

from spotpool.localworld.emulator import wait_until
from spotpool.localworld.kube import Kube
from spotpool.localworld.operator import pool_manifest
from spotpool.localworld.slow_proxy import StallProxy
from tests.e2e._support.leases import Running, coordination_api
from tests.operator.fakes import FakeCloud, FakeCluster, FakeEngine, ref, run, settings

pytestmark = pytest.mark.e2e
D = 6.0


class ApiEvents:
    """core/v1 Events posted through a replica's own connection, each on a thread."""

    def __init__(self, kubeconfig: Path) -> None:
        client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        self.core = kubernetes.client.CoreV1Api(client)
        self.posting: list[threading.Thread] = []

    def post(self, ref: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = ref["metadata"]
        body = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": ref["apiVersion"], "kind": ref["kind"], **meta},
            "type": type_, "reason": reason, "message": message, "source": {"component": "a"},
        }  # fmt: skip
        thread = threading.Thread(
            target=self.core.create_namespaced_event, args=(meta["namespace"], body), daemon=True
        )
        thread.start()
        self.posting.append(thread)


def _reasons(kube: Kube, namespace: str, name: str) -> list[str]:
    out = kube.ok("-n", namespace, "get", "events", "--field-selector",
                  f"involvedObject.name={name}", "-o", "jsonpath={.items[*].reason}")  # fmt: skip
    return out.split()


def test_a_replica_whose_shard_went_posts_no_reclaimed_event(
    lease_world: tuple[Kube, str, StallProxy, Path],
    tmp_path: Path,
) -> None:
    kube, namespace, proxy, proxied = lease_world
    name = f"pool-{uuid.uuid4().hex[:6]}"
    manifest = pool_manifest(name)
    kube.ok("-n", namespace, "apply", "-f", "-", stdin=json.dumps(manifest))
    body = json.loads(kube.ok("-n", namespace, "get", "spotpool", name, "-o", "json"))
    uid = body["metadata"]["uid"]
    cloud, cluster, events = FakeCloud(), FakeCluster(), ApiEvents(proxied)
    cluster.secrets[(namespace, "tencentcloud")] = {"secretId": b"AKID-a", "secretKey": b"key-a"}
    reconciler = Reconciler(
        settings(tmp_path), cluster, events, Metrics(),
        lambda pool, creds, region, progress: FakeEngine(cloud, pool, creds),
    )  # fmt: skip
    a = Running(ShardLeases(coordination_api(proxied), namespace, "ef", 1, D, hostname="pod-a"))
    b: Running | None = None
    try:
        reconciler.shards = a.replica
        wait_until(lambda: a.replica.serves(uid), "A to hold the shard", 30)
        run(reconciler.converge(ref(body)))
        wait_until(lambda: "Converged" in _reasons(kube, namespace, name), "A's Converged", 30)

        proxy.stalled.set()  # A's connection stalls: its renewals stop reaching the server
        b = Running(
            ShardLeases(coordination_api(kube.kubeconfig), namespace, "ef", 1, D, hostname="pod-b")
        )
        b_replica = b.replica
        wait_until(lambda: b_replica.serves(uid), "B to take the shard over", 4 * D)
        assert not a.replica.serves(uid)
        # A's probe saw slot 0 go; its daemon handles it now, after the shard went.
        reconciler.pools[uid].gone_slots = {0}
        try:
            run(reconciler.replace_gone(ref(body)))
        except Exception as error:  # its engine call is refused: NotServed
            assert "NotServed" in repr(error) or "another replica" in str(error), error
        proxy.stalled.clear()  # whatever A sent reaches the server now
        for thread in events.posting:
            thread.join(30)
        assert "Reclaimed" not in _reasons(kube, namespace, name)
    finally:
        proxy.stalled.clear()
        if b is not None:
            b.stop()
        a.stop()
