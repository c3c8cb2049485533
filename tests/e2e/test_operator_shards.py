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
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from spotpool_operator.sharding import shard_of

from spotpool.cluster import s3
from spotpool.localworld.emulator import SPOTPOOL, EmulatorProcess, start_emulator
from spotpool.localworld.kube import Kube
from spotpool.localworld.slow_proxy import StallProxy, target_of
from tests.conftest import require_tool
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
POOLS, SHARDS, LEASE, REFRESH = 30, 8, 6.0, 20
SLOW = 0.15  # seconds replica a's API-server connection adds to every chunk, each way
RUN_LINE = re.compile(
    r"^\[(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\].*\] (?P<what>\w+) of (?P<stack>\S+) "
    r"(?P<edge>begins|ends)$"
)


@dataclass
class Fleet:
    kube: Kube
    emulator: EmulatorProcess
    server: s3.LocalS3
    directory: Path
    lease_namespace: str
    replicas: dict[str, OperatorWorld] = field(default_factory=dict)
    killed: dict[str, float] = field(default_factory=dict)  # name -> time.time() of the kill
    proxies: list[StallProxy] = field(default_factory=list)

    def start(self, name: str, slow: float = 0.0) -> OperatorWorld:
        """A replica; `slow`: its API-server connection goes through a proxy adding that many
        seconds to every chunk (a brownout of one node's network)."""
        directory = self.directory / name
        directory.mkdir()
        env = {"SPOTPOOL_SHARDS": str(SHARDS)}
        if slow:
            proxy = StallProxy(*target_of(self.kube.kubeconfig))
            proxy.delay = slow
            self.proxies.append(proxy)
            proxied = proxy.kubeconfig(self.kube.kubeconfig, directory / "kubeconfig")
            env["KUBECONFIG"] = str(proxied)
        world = OperatorWorld(
            self.kube, self.emulator, directory, refresh_seconds=REFRESH,
            hostname=f"spotpool-operator-{name}-{uuid.uuid4().hex[:4]}",
            lease_namespace=self.lease_namespace,
            backend_url=self.server.backend_url, backend_env=self.server.env,
            namespace_prefix="sh-", env=env,
        )  # fmt: skip
        world.start()
        self.replicas[name] = world
        return world

    def kill(self, name: str) -> None:
        self.killed[name] = time.time()
        self.replicas[name].kill()

    def live(self) -> dict[str, OperatorWorld]:
        return {n: w for n, w in self.replicas.items() if n not in self.killed}

    def held(self) -> dict[str, set[int]]:
        """Shards each live replica holds, from its metrics."""
        return {name: _held(world.metrics()) for name, world in self.live().items()}


def _held(metrics: str) -> set[int]:
    found = re.findall(r'^spotpool_shard_held\{shard="(\d+)"\} 1\.0$', metrics, re.MULTILINE)
    return {int(shard) for shard in found}


@pytest.fixture(scope="module")
def fleet(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    for tool in ("pulumi", "pulumi-resource-tencentcloud", "versitygw"):
        require_tool(tool)
    directory = tmp_path_factory.mktemp("operator-shards")
    server = s3.start(directory / "s3")
    emulator = start_emulator(directory / "cloud.db", directory / "emulator.log", boot_seconds=0)
    lease_namespace = f"shards-{uuid.uuid4().hex[:6]}"
    kube.ok("create", "namespace", lease_namespace)
    fleet = Fleet(kube, emulator, server, directory, lease_namespace)
    try:
        yield fleet
    finally:
        namespaces = {ns for world in fleet.replicas.values() for ns in world.namespaces}
        for world in fleet.replicas.values():
            world.stop()
        for namespace in [*namespaces, lease_namespace]:
            kube.run("delete", "namespace", namespace, "--wait=false")
        emulator.stop()
        server.stop()
        for proxy in fleet.proxies:
            proxy.close()


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


def _assert_one_writer_at_a_time(fleet: Fleet) -> int:
    """No two replicas ever ran the engine on one stack at the same time; the runs counted."""
    runs = {name: _runs(world, fleet.killed.get(name)) for name, world in fleet.replicas.items()}
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


def _shards_report(fleet: Fleet) -> dict[str, Any]:
    command = [str(SPOTPOOL), "shards", "--lease-namespace", fleet.lease_namespace,
               "--format", "json"]  # fmt: skip
    env = {**os.environ, "KUBECONFIG": str(fleet.kube.kubeconfig)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _ids(pool: dict[str, Any]) -> list[str]:
    return sorted(i["instanceId"] for i in pool["status"].get("instances") or [])


def test_replicas_share_the_pools_and_take_over_a_killed_ones(fleet: Fleet) -> None:
    a = fleet.start("a", slow=SLOW)  # one replica's API-server connection slowed throughout
    fleet.start("b")
    ns = a.namespace()
    names = [f"pool-{i}" for i in range(POOLS)]
    items = [{**pool_manifest(n, replicas=1), "metadata": {"name": n, "namespace": ns}}
             for n in names]  # fmt: skip
    a.kube.ok("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                    "items": items}))  # fmt: skip
    pools = {n: a.wait_ready(ns, n, 1, timeout=400) for n in names}
    uids = {n: p["metadata"]["uid"] for n, p in pools.items()}
    held = fleet.held()
    assert sorted(len(s) for s in held.values()) == [SHARDS // 2] * 2, held
    assert set().union(*held.values()) == set(range(SHARDS))
    serving = {n: "a" if shard_of(uids[n], SHARDS) in held["a"] else "b" for n in names}
    assert set(serving.values()) == {"a", "b"}, serving  # both replicas serve pools

    fleet.start("c")  # a third replica takes its share; no instance changes
    a.wait_until(
        lambda: sorted(len(s) for s in fleet.held().values()) == [2, 3, 3], "a 2/3/3 split", 60
    )
    held = fleet.held()
    assert set().union(*held.values()) == set(range(SHARDS))
    owner = {s: name for name, shards in held.items() for s in shards}
    report = _shards_report(fleet)  # `spotpool shards`, as a person would ask
    hosts = {name: world.hostname for name, world in fleet.replicas.items()}
    assert {r["shard"]: r["holder"] for r in report["shards"]} == {
        s: hosts[name] for s, name in owner.items()
    }
    assert report["pools"] >= POOLS  # (other tests' pools count too: it reads the cluster)
    assert sum(r["pools"] for r in report["replicas"]) == report["pools"]
    time.sleep(REFRESH / 2)  # the new holder looks at its pools: no up, nothing replaced
    for name in names:
        assert _ids(a.get(ns, name) or {}) == _ids(pools[name]), name

    # SIGKILL the replica serving the most pools, and take an instance of each of its pools
    by_replica = {r: [n for n in names if owner[shard_of(uids[n], SHARDS)] == r] for r in held}
    victim = max(by_replica, key=lambda r: len(by_replica[r]))
    orphaned = by_replica[victim]
    assert orphaned
    fleet.kill(victim)
    killed = time.monotonic()
    gone = [_ids(pools[n])[0] for n in orphaned]
    a_live = next(iter(fleet.live().values()))
    a_live.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": gone})
    a_live.wait_until(
        lambda: set().union(*fleet.held().values()) == set(range(SHARDS)),
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
        pool = a_live.wait_ready(ns, name, 1, timeout=120)
        assert sorted(a_live.cloud(uids[name])) == _ids(pool), name
    locks = fleet.server.directory / fleet.server.bucket / ".pulumi" / "locks"
    a_live.wait_until(
        lambda: not [p for p in locks.rglob("*.json") if f"/{ns}." in str(p)],
        "no lock left on any stack",
        60,
    )
    counts = [int(float(v)) for world in fleet.live().values()
              for v in re.findall(r"^spotpool_shard_pools\{[^}]*\} (\S+)$", world.metrics(),
                                  re.MULTILINE)]  # fmt: skip
    assert sum(counts) == POOLS  # each pool counted by exactly one replica

    # deleting: every replica keeps the finalizer, the shard's holder destroys the stack
    doomed = names[:3]
    a_live.kube.ok("-n", ns, "delete", "spotpool", *doomed, "--wait=false")
    for name in doomed:
        a_live.wait_until(lambda n=name: a_live.get(ns, n) is None, f"{name} gone", 120)  # type: ignore[misc]
        assert not a_live.cloud(uids[name]), name  # its instance terminated, not left behind
    assert _assert_one_writer_at_a_time(fleet) >= POOLS
    for world in fleet.replicas.values():
        assert "StackLocked" not in world.log.read_text(errors="replace")
