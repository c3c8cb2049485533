"""Two operator replicas on one backend (issue 20): replica A reaches the API server through a
TCP proxy that stalls its connection in the middle of its Pulumi runs, replica B's clock runs
15 s ahead; B joins while A's runs are under way, then A's connection stalls for longer than
the Lease. No two replicas ever run Pulumi on one stack (their logs), no pool ends with a
leaked or a missing instance, no lock is left."""

import json
import re
import time
import uuid
from pathlib import Path

import pytest

from spotpool.localworld import run_log
from spotpool.localworld.emulator import start_emulator
from spotpool.localworld.kube import Kube
from spotpool.localworld.slow_proxy import StallProxy, target_of
from tests.conftest import require_tool
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
POOLS, SHARDS, LEASE = 6, 4, 6.0


def test_a_stalled_replica_and_a_replica_15s_ahead_never_run_pulumi_on_one_stack(
    kube: Kube, tmp_path: Path
) -> None:
    for tool in ("pulumi", "pulumi-resource-tencentcloud"):
        require_tool(tool)
    emulator = start_emulator(tmp_path / "cloud.db", tmp_path / "emulator.log", boot_seconds=0)
    proxy = StallProxy(*target_of(kube.kubeconfig))
    proxied = proxy.kubeconfig(kube.kubeconfig, tmp_path / "kubeconfig-via-proxy")
    lease_namespace = f"fencing-{uuid.uuid4().hex[:6]}"
    kube.ok("create", "namespace", lease_namespace)
    backend = f"file://{tmp_path / 'backend'}"  # one backend for both (a shared volume)
    (tmp_path / "backend").mkdir()
    replicas: dict[str, OperatorWorld] = {}

    def start(name: str, env: dict[str, str]) -> OperatorWorld:
        (tmp_path / name).mkdir()
        world = OperatorWorld(
            kube, emulator, tmp_path / name, refresh_seconds=300,
            hostname=f"spotpool-operator-{name}-{uuid.uuid4().hex[:4]}",
            lease_namespace=lease_namespace, backend_url=backend, namespace_prefix="fence-",
            env={"SPOTPOOL_SHARDS": str(SHARDS), **env},
        )  # fmt: skip
        world.start()
        replicas[name] = world
        return world

    try:
        a = start("a", {"KUBECONFIG": str(proxied)})
        ns = a.namespace()
        names = [f"pool-{i}" for i in range(POOLS)]
        items = [{**pool_manifest(n, replicas=1), "metadata": {"name": n, "namespace": ns}}
                 for n in names]  # fmt: skip
        a.kube.ok("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                        "items": items}))  # fmt: skip
        uids = {n: a.wait_ready(ns, n, 1, timeout=300)["metadata"]["uid"] for n in names}

        # Slow runs: the provider waits for RUNNING through DescribeInstances, 2 s each.
        slow = {"Service": "cvm", "Action": "DescribeInstances", "Rate": 0.0, "LatencyMs": 2000}
        emulator.admin_ok("POST", "/_emulator/faults", slow)
        before = len(a.log.read_bytes())
        for name in names:
            a.kube.ok("-n", ns, "patch", "spotpool", name, "--type=merge",
                      "-p", json.dumps({"spec": {"replicas": 2}}))  # fmt: skip
        a.wait_until(lambda: b" begins" in a.log.read_bytes()[before:], "A's ups under way", 60)
        time.sleep(3)
        start("b", {"SPOTPOOL_CLOCK_OFFSET": str(15)})  # joins while A's ups run
        time.sleep(LEASE)
        proxy.stalled.set()  # A's connection to the API server stalls mid-run
        time.sleep(3 * LEASE)
        proxy.stalled.clear()
        emulator.admin_ok("DELETE", "/_emulator/faults")

        for name in names:
            a.wait_ready(ns, name, 2, timeout=300)
        # A status can say Ready while the other replica's run on the stack still ends (A's
        # write of its own earlier run, delayed by the stall): a lock of a live run goes with
        # it; a lock left behind stays.
        locks = tmp_path / "backend" / ".pulumi" / "locks"
        a.wait_until(lambda: not list(locks.rglob("*.json")), "every lock released", 60)
        for name in names:
            pool = a.wait_ready(ns, name, 2, timeout=60)
            ids = sorted(i["instanceId"] for i in pool["status"]["instances"])
            cloud = sorted(a.cloud(uids[name]))
            assert cloud == ids, (name, _told(replicas, set(cloud) ^ set(ids)))  # no leak
        logs = {name: world.log for name, world in replicas.items()}
        overlaps, runs = run_log.overlaps(logs, time.time())
        print(f"\n{runs} engine runs over {POOLS} stacks by 2 replicas; {len(overlaps)} overlap")
        assert not overlaps, overlaps
        b_log = replicas["b"].log.read_text(errors="replace")
        assert re.search(r"\] \w+ of \S+ begins$", b_log, re.MULTILINE), "B ran nothing"
        for world in replicas.values():
            assert "StackLocked" not in world.log.read_text(errors="replace")
    finally:
        proxy.stalled.clear()
        namespaces = {n for world in replicas.values() for n in world.namespaces}
        _delete_pools_while_served(kube, namespaces)  # no pool left holding its namespace
        for world in replicas.values():
            world.stop()
        for namespace in [*namespaces, lease_namespace]:
            kube.run("delete", "namespace", namespace, "--wait=false")
        proxy.close()
        emulator.stop()


def _delete_pools_while_served(kube: Kube, namespaces: set[str]) -> None:
    """Delete the test's pools while an operator still runs to take their finalizers off: a
    pool left behind keeps its namespace terminating for the rest of the session."""
    for namespace in namespaces:
        kube.run("-n", namespace, "delete", "spotpools", "--all", "--wait=false")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        left = [
            n for n in namespaces
            if kube.run("-n", n, "get", "spotpools", "-o", "name").stdout.strip()
        ]  # fmt: skip
        if not left:
            return
        time.sleep(1)


def _told(replicas: dict[str, OperatorWorld], ids: set[str]) -> list[str]:
    """What each replica's log says of these instances (a failure's evidence)."""
    return [
        f"{name}: {line}"
        for name, world in replicas.items()
        for line in world.log.read_text(errors="replace").splitlines()
        if any(i in line for i in ids)
    ][-20:]
