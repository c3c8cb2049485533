"""Fencing on the real kube-apiserver (issue 20, items 1-4): a replica whose clock runs 15 s
ahead never takes a shard a live replica keeps renewing; a replica whose API-server connection
stalls (a TCP proxy holding its bytes) kills its runs before anyone may take its shards over;
with operators, no two replicas ever run Pulumi on one stack (their logs)."""

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from spotpool_operator.replicas.shards import ShardLeases

from spotpool.localworld.kube import Kube
from spotpool.localworld.slow_proxy import StallProxy
from tests.e2e._support.leases import Running, coordination_api

pytestmark = pytest.mark.e2e
SHARDS, D, AHEAD = 4, 6.0, 15.0


def _watch(a: Running, b: Running, seconds: float, until: object = None) -> list[str]:
    """Sample both replicas every 50 ms for `seconds` (or until `until()`): the shards both
    served at once."""
    both: list[str] = []
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        shared = a.held() & b.held()
        if shared:
            both.append(f"{time.monotonic():.2f}: {sorted(shared)}")
        if callable(until) and until():
            break
        time.sleep(0.05)
    return both


def test_a_replica_15s_ahead_and_a_stalled_replica_never_serve_one_shard_at_once(
    lease_world: tuple[Kube, str, StallProxy, Path],
) -> None:
    kube, namespace, proxy, proxied = lease_world
    a = Running(
        ShardLeases(coordination_api(proxied), namespace, "sp", SHARDS, D, hostname="pod-a")
    )
    try:
        ends = time.monotonic() + 30
        while a.held() != set(range(SHARDS)) and time.monotonic() < ends:
            time.sleep(0.1)
        assert a.held() == set(range(SHARDS))

        # B joins with its clock 15 s ahead: to its wall clock every Lease of A's looks 15 s
        # old (more than twice the duration); it takes its share only as A hands shards over.
        ahead = lambda: datetime.now(UTC) + timedelta(seconds=AHEAD)  # noqa: E731
        b_api = coordination_api(kube.kubeconfig)
        b = Running(ShardLeases(b_api, namespace, "sp", SHARDS, D, "pod-b", ahead))
        try:
            both = _watch(a, b, 3 * D, until=lambda: len(a.held()) == len(b.held()) == 2)
            assert not both, f"served by both replicas at once: {both[:5]}"
            assert len(a.held()) == len(b.held()) == 2, (a.held(), b.held())
            assert not _watch(a, b, D)  # and it stays so (a Lease duration and more)
            assert len(a.held()) == len(b.held()) == 2, (a.held(), b.held())

            # A's connection stalls: A stops its shards' work before B may take them
            theirs = a.held()
            proxy.stalled.set()
            stalled = time.monotonic()
            taken: dict[int, float] = {}

            def all_taken() -> bool:
                for shard in b.held() & theirs:
                    taken.setdefault(shard, time.monotonic())
                return set(taken) == theirs

            both = _watch(a, b, 4 * D, until=all_taken)
            assert not both, f"served by both replicas at once: {both[:5]}"
            assert set(taken) == theirs, (taken, theirs)
            for shard in theirs:
                killed = [t for t in a.stops.get(shard, []) if t >= stalled]
                assert killed, f"A never stopped shard {shard}"
                gap = taken[shard] - killed[0]
                print(
                    f"\nshard {shard}: A stopped {killed[0] - stalled:.2f} s into the stall, "
                    f"B took it {taken[shard] - stalled:.2f} s in ({gap:.2f} s later)"
                )
                assert gap > 1.0, f"shard {shard}: B took it {gap:.2f} s after A stopped it"
            proxy.stalled.clear()
            assert not _watch(a, b, D)
        finally:
            b.stop()
    finally:
        proxy.stalled.clear()
        a.stop()


@pytest.mark.heavy  # a timing property: it wants the machine's cores, not a third of them
def test_a_replica_keeps_its_16_shards_through_a_slow_api_server_connection(
    lease_world: tuple[Kube, str, StallProxy, Path],
) -> None:
    """Every request through the proxy takes about 0.3 s more (0.15 s each way): a round of 18
    requests one after another would take longer than a Lease is held, and the replica would
    drop and re-take its shards in a loop; in parallel a round takes under a second."""
    _, namespace, proxy, proxied = lease_world
    shards = 16
    a = ShardLeases(coordination_api(proxied), namespace, "sp", shards, D, hostname="pod-a")
    running = Running(a)
    try:
        ends = time.monotonic() + 30
        full = set(range(shards))
        while {s for s in full if a.holds(s)} != full and time.monotonic() < ends:
            time.sleep(0.1)
        assert {s for s in full if a.holds(s)} == full
        proxy.delay = 0.15
        dropped: set[int] = set()
        ends = time.monotonic() + 4 * D
        while time.monotonic() < ends:
            dropped |= {s for s in full if not a.holds(s)}
            time.sleep(0.05)
        assert not dropped, f"shards dropped under a slow connection: {sorted(dropped)}"
        assert not running.stops  # no shard's work was stopped
    finally:
        proxy.delay = 0.0
        running.stop()
