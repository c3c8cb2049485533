"""Shards over Leases on the real kube-apiserver: replicas divide the shards, a joining replica
takes its share with the fewest moves, a dead replica's shards are taken over when their Leases
expire, and no shard is ever served by two replicas at once."""

import time
import uuid
from collections import Counter
from collections.abc import Iterator

import kubernetes
import pytest
from spotpool_operator.replicas.shards import ShardLeases

from spotpool.localworld.kube import Kube

pytestmark = pytest.mark.e2e
SHARDS, DURATION = 12, 5.0


@pytest.fixture()
def leases(kube: Kube) -> Iterator[tuple[object, str]]:
    namespace = f"shards-{uuid.uuid4().hex[:6]}"
    kube.ok("create", "namespace", namespace)
    client = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kube.kubeconfig)
    )
    try:
        yield kubernetes.client.CoordinationV1Api(client), namespace
    finally:
        kube.run("delete", "namespace", namespace, "--wait=false")


class Replicas:
    """Replicas stepped by hand, each as its own hostname; every step checks that no shard is
    served by two of them."""

    def __init__(self, api: object, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.live: dict[str, ShardLeases] = {}
        self.all: dict[str, ShardLeases] = {}
        self.stopped: Counter[str] = Counter()  # shards each replica stopped serving

    def join(self, host: str) -> ShardLeases:
        replica = ShardLeases(self.api, self.namespace, "sp", SHARDS, DURATION, hostname=host)

        def stopped(shard: int, uids: list[str]) -> None:
            self.stopped.update([host])

        replica.on_stop.append(stopped)
        self.live[host] = self.all[host] = replica
        return replica

    def held(self) -> dict[str, int]:
        return {h: sum(r.holds(s) for s in range(SHARDS)) for h, r in self.live.items()}

    def round(self) -> None:
        for replica in list(self.live.values()):
            replica.step()
            for shard in range(SHARDS):
                serving = [h for h, r in self.all.items() if r.holds(shard)]
                assert len(serving) <= 1, f"shard {shard} served by {serving}"

    def settle(self, want: dict[str, int], timeout: float = 30.0) -> float:
        started = time.monotonic()
        while self.held() != want:
            assert time.monotonic() - started < timeout, f"held {self.held()}, want {want}"
            self.round()
            time.sleep(0.2)
        return time.monotonic() - started


def test_replicas_divide_the_shards_and_take_over_a_dead_ones(
    leases: tuple[object, str],
) -> None:
    replicas = Replicas(*leases)
    replicas.join("host-a")
    replicas.settle({"host-a": 12})
    replicas.join("host-b")
    replicas.settle({"host-a": 6, "host-b": 6})
    assert replicas.stopped == {"host-a": 6}  # half moved, not more
    c = replicas.join("host-c")
    replicas.settle({"host-a": 4, "host-b": 4, "host-c": 4})
    assert replicas.stopped == {"host-a": 8, "host-b": 2}  # c's 4 came from a and b alone
    theirs = {s for s in range(SHARDS) if c.holds(s)}

    del replicas.live["host-c"]  # SIGKILL: it renews nothing from now on
    killed = time.monotonic()
    took = replicas.settle({"host-a": 6, "host-b": 6})
    assert not any(c.holds(s) for s in range(SHARDS))  # it stopped before anyone took over
    assert DURATION * 0.8 < took < DURATION + 2 * DURATION / 3 + 2  # the Lease, one round
    assert replicas.stopped["host-a"] == 8 and replicas.stopped["host-b"] == 2  # only c's moved
    for shard in theirs:  # the new holder can prove c gone (lock recovery's rule)
        holder = next(r for r in replicas.live.values() if r.holds(shard))
        assert "host-c" in holder.leases[shard].earlier_holders()
        assert holder.leases[shard].acquired_at().timestamp() > killed - 1

    for replica in replicas.live.values():
        replica.release_all()
    api, namespace = leases
    left = api.list_namespaced_lease(namespace).items  # type: ignore[attr-defined]
    held = {i.metadata.name for i in left if i.spec.holder_identity}
    assert held == {"sp-member-host-c"}  # all given back; only the dead one's membership


def test_no_shard_is_taken_while_an_unsharded_replica_holds_the_single_lease(
    leases: tuple[object, str],
) -> None:
    """A rollout from before shards: the old pod holds the one Lease `sp` and writes every
    stack; a new replica holds no shard until it lets go."""
    api, namespace = leases
    old = ShardLeases(api, namespace, "sp", 1, DURATION, hostname="old-pod")
    old.step()
    assert old.holds(0)
    new = ShardLeases(api, namespace, "sp", SHARDS, DURATION, hostname="new-pod")
    for _ in range(3):
        new.step()
        old.step()
    assert not any(new.holds(s) for s in range(SHARDS))
    old.release_all()  # the old pod ends (SIGTERM)
    new.step()
    assert all(new.holds(s) for s in range(SHARDS))
    new.release_all()
