"""Operator replicas sharing pools on an S3 backend (versitygw): two replicas (one reaching the
API server through a connection slowed throughout), then a third, each under its own hostname
as pods are; every pool served by exactly one replica at any time
(no two replicas ever run the engine on one stack: checked on their logs); a replica SIGKILLed
with its whole process tree, and its pools served again by the others once its shard Leases
expire — with no leaked, duplicated or stuck pool; pools deleted by their shard's holder."""

import json
import os
import re
import subprocess
import time
from datetime import datetime
from typing import Any

import pytest
from spotpool_operator.replicas.sharding import shard_of

from spotpool.localworld.emulator import SPOTPOOL
from tests.e2e._support.replicas import Replicas, apply_pools
from tests.operator.world import OperatorWorld

# The pools' runs open their secrets through the key service (a passphrase run costs about
# twice the CPU); the replicas' path runs with the default provider in test_frozen_replica.py
# and test_fast_path_handover.py.
pytestmark = [pytest.mark.e2e, pytest.mark.heavy, pytest.mark.usefixtures("keyserver_stacks")]
POOLS, SHARDS, LEASE, REFRESH = 16, 8, 6.0, 20
SLOW = 0.15  # seconds replica a's API-server connection adds to every chunk, each way
RUN_LINE = re.compile(
    r"^\[(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\].*\] (?P<what>\w+) of (?P<stack>\S+) "
    r"(?P<edge>begins|ends)$"
)


@pytest.fixture
def replica_options() -> dict[str, Any]:
    # the pools' namespace is left terminating at the end (16 destroys would take minutes)
    return {"shards": SHARDS, "s3_backend": True, "namespace_prefix": "sh-",
            "refresh_seconds": REFRESH, "delete_pools": False}  # fmt: skip


def _start(replicas: Replicas, name: str, slow: float = 0.0) -> OperatorWorld:
    """A replica; `slow`: its API-server connection goes through a proxy adding that many
    seconds to every chunk (a brownout of one node's network)."""
    if not slow:
        return replicas.start(name)
    _, kubeconfig = replicas.proxy(name, delay=slow)
    return replicas.start(name, {"KUBECONFIG": str(kubeconfig)})


def _runs(world: OperatorWorld, killed_at: float | None) -> dict[str, list[tuple[float, float]]]:
    """stack -> the intervals in which this replica ran the engine on it (from its log)."""
    depth: dict[str, int] = {}
    began: dict[str, float] = {}
    intervals: dict[str, list[tuple[float, float]]] = {}
    for line in world.log.read_text(errors="replace").splitlines():
        found = RUN_LINE.match(line)
        if not found:
            continue
        at = datetime.strptime(found["at"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        stack = found["stack"]
        if found["edge"] == "begins":
            if not depth.get(stack):
                began[stack] = at
            depth[stack] = depth.get(stack, 0) + 1
        else:
            depth[stack] -= 1
            if not depth[stack]:
                intervals.setdefault(stack, []).append((began[stack], at))
    for stack, open_runs in depth.items():
        if open_runs:  # killed mid-run: it ran until the kill
            assert killed_at is not None, f"{stack}: a run of {world.hostname} never ended"
            intervals.setdefault(stack, []).append((began[stack], killed_at))
    return intervals


def _assert_one_writer_at_a_time(replicas: Replicas) -> int:
    """No two replicas ever ran the engine on one stack at the same time; the runs counted."""
    runs = {
        name: _runs(world, replicas.killed.get(name)) for name, world in replicas.replicas.items()
    }
    stacks = {stack for by_stack in runs.values() for stack in by_stack}
    for stack in stacks:
        spans = [
            (start, end, name)
            for name, by_stack in runs.items()
            for start, end in by_stack.get(stack, [])
        ]
        for start, end, first in spans:
            for other_start, other_end, second in spans:
                overlap = start < other_end and other_start < end
                assert first == second or not overlap, f"{stack}: {first} and {second} overlap"
    return sum(len(spans) for by_stack in runs.values() for spans in by_stack.values())


def _shards_report(replicas: Replicas) -> dict[str, Any]:
    command = [str(SPOTPOOL), "shards", "--lease-namespace", replicas.lease_namespace,
               "--format", "json"]  # fmt: skip
    env = {**os.environ, "KUBECONFIG": str(replicas.kube.kubeconfig)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _ids(pool: dict[str, Any]) -> list[str]:
    return sorted(i["instanceId"] for i in pool["status"].get("instances") or [])


def test_replicas_share_the_pools_and_take_over_a_killed_ones(replicas: Replicas) -> None:
    a = _start(replicas, "a", slow=SLOW)  # one replica's API-server connection slowed throughout
    replicas.start("b")
    ns = a.namespace()
    names = [f"pool-{i}" for i in range(POOLS)]
    apply_pools(a, ns, names)
    pools = {n: a.wait_ready(ns, n, 1, timeout=400) for n in names}
    uids = {n: p["metadata"]["uid"] for n, p in pools.items()}
    held = replicas.held()
    assert sorted(len(s) for s in held.values()) == [SHARDS // 2] * 2, held
    assert set().union(*held.values()) == set(range(SHARDS))
    serving = {n: "a" if shard_of(uids[n], SHARDS) in held["a"] else "b" for n in names}
    assert set(serving.values()) == {"a", "b"}, serving  # both replicas serve pools

    c = replicas.start("c")  # a third replica takes its share; no instance changes
    a.wait_until(
        lambda: sorted(len(s) for s in replicas.held().values()) == [2, 3, 3], "a 2/3/3 split", 60
    )
    held = replicas.held()
    assert set().union(*held.values()) == set(range(SHARDS))
    owner = {s: name for name, shards in held.items() for s in shards}
    report = _shards_report(replicas)  # `spotpool shards`, as a person would ask
    hosts = {name: world.hostname for name, world in replicas.replicas.items()}
    assert {r["shard"]: r["holder"] for r in report["shards"]} == {
        s: hosts[name] for s, name in owner.items()
    }
    assert report["pools"] >= POOLS  # (other tests' pools count too: it reads the cluster)
    assert sum(r["pools"] for r in report["replicas"]) == report["pools"]
    # The new holder settles each pool it took as it decides: no up, the stack applied the spec.
    for name in (n for n in names if owner[shard_of(uids[n], SHARDS)] == "c"):
        settled = f"{ns}/{name}] spec already applied; nothing to do"
        c.wait_until(lambda s=settled: s in c.log.read_text(errors="replace"),  # type: ignore[misc]
                     f"c settling {name}", LEASE + REFRESH)  # fmt: skip
    assert not re.search(rf"\] up of {re.escape(ns)}\.", c.log.read_text(errors="replace"))
    for name in names:
        assert _ids(a.get(ns, name) or {}) == _ids(pools[name]), name

    # SIGKILL the replica serving the most pools, and take an instance of each of its pools
    by_replica = {r: [n for n in names if owner[shard_of(uids[n], SHARDS)] == r] for r in held}
    victim = max(by_replica, key=lambda r: len(by_replica[r]))
    orphaned = by_replica[victim]
    assert orphaned
    replicas.kill(victim)
    killed = time.monotonic()
    gone = [_ids(pools[n])[0] for n in orphaned]
    a_live = next(iter(replicas.live().values()))
    a_live.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": gone})
    a_live.wait_until(
        lambda: set().union(*replicas.held().values()) == set(range(SHARDS)),
        "the killed replica's shards taken over",
        LEASE + REFRESH,
    )
    took_over = time.monotonic() - killed

    def replaced_in(name: str) -> bool:
        pool = a_live.get(ns, name) or {}
        ids = _ids(pool) if pool else []
        return bool(ids) and ids[0] not in gone and pool["status"].get("readyReplicas") == 1

    for name in orphaned:
        a_live.wait_until(
            lambda name=name: replaced_in(name),  # type: ignore[misc]
            f"{name}'s reclaimed instance replaced",
            LEASE + REFRESH + 120,
        )
    replaced = time.monotonic() - killed
    print(
        f"\nshards taken over {took_over:.1f} s, all {len(orphaned)} reclaims replaced "
        f"{replaced:.1f} s after the kill (Lease {LEASE:.0f} s, refresh {REFRESH} s)"
    )

    # no leak, no duplicate, no stuck lock; every pool Ready with its one instance
    for name in names:
        pool = a_live.wait_ready(ns, name, 1, timeout=LEASE + REFRESH + 120)
        assert sorted(a_live.cloud(uids[name])) == _ids(pool), name
    assert replicas.server is not None
    locks = replicas.server.directory / replicas.server.bucket / ".pulumi" / "locks"
    a_live.wait_until(
        lambda: not [p for p in locks.rglob("*.json") if f"/{ns}." in str(p)],
        "no lock left on any stack",
        60,
    )
    counts = [int(float(v)) for world in replicas.live().values()
              for v in re.findall(r"^spotpool_shard_pools\{[^}]*\} (\S+)$", world.metrics(),
                                  re.MULTILINE)]  # fmt: skip
    assert sum(counts) == POOLS  # each pool counted by exactly one replica

    # deleting: every replica keeps the finalizer, the shard's holder destroys the stack
    doomed = names[:3]
    a_live.kube.ok("-n", ns, "delete", "spotpool", *doomed, "--wait=false")
    for name in doomed:
        a_live.wait_until(lambda n=name: a_live.get(ns, n) is None, f"{name} gone", 120)  # type: ignore[misc]
        assert not a_live.cloud(uids[name]), name  # its instance terminated, not left behind
    assert _assert_one_writer_at_a_time(replicas) >= POOLS
    for world in replicas.replicas.values():
        assert "StackLocked" not in world.log.read_text(errors="replace")
