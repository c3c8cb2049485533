"""Two operator replicas on one backend (issue 20): replica A reaches the API server through a
TCP proxy that stalls its connection in the middle of its Pulumi runs, replica B's clock runs
15 s ahead; B joins while A's runs are under way, then A's connection stalls for longer than
the Lease. No two replicas ever run Pulumi on one stack (their logs), no pool ends with a
leaked or a missing instance, no lock is left."""

import json
import re
import time
from typing import Any

import pytest

from spotpool.localworld import run_log
from tests.e2e._support.replicas import Replicas, apply_pools
from tests.operator.world import OperatorWorld

pytestmark = [pytest.mark.e2e, pytest.mark.heavy]
POOLS, SHARDS, LEASE = 6, 4, 6.0


@pytest.fixture
def replica_options() -> dict[str, Any]:
    return {"shards": SHARDS, "namespace_prefix": "fence-"}  # one file:// backend for both


def test_a_stalled_replica_and_a_replica_15s_ahead_never_run_pulumi_on_one_stack(
    replicas: Replicas,
) -> None:
    emulator = replicas.emulator
    proxy, proxied = replicas.proxy("a")
    a = replicas.start("a", {"KUBECONFIG": str(proxied)})
    ns = a.namespace()
    names = [f"pool-{i}" for i in range(POOLS)]
    apply_pools(a, ns, names)
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
    replicas.start("b", {"SPOTPOOL_CLOCK_OFFSET": str(15)})  # joins while A's ups run
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
    locks = replicas.directory / "backend" / ".pulumi" / "locks"
    a.wait_until(lambda: not list(locks.rglob("*.json")), "every lock released", 60)
    for name in names:
        pool = a.wait_ready(ns, name, 2, timeout=60)
        ids = sorted(i["instanceId"] for i in pool["status"]["instances"])
        cloud = sorted(a.cloud(uids[name]))
        assert cloud == ids, (name, _told(replicas.replicas, set(cloud) ^ set(ids)))  # no leak
    logs = {name: world.log for name, world in replicas.replicas.items()}
    overlaps, runs = run_log.overlaps(logs, time.time())
    print(f"\n{runs} engine runs over {POOLS} stacks by 2 replicas; {len(overlaps)} overlap")
    assert not overlaps, overlaps
    b_log = replicas.replicas["b"].log.read_text(errors="replace")
    assert re.search(r"\] \w+ of \S+ begins$", b_log, re.MULTILINE), "B ran nothing"
    for world in replicas.replicas.values():
        assert "StackLocked" not in world.log.read_text(errors="replace")


def _told(replicas: dict[str, OperatorWorld], ids: set[str]) -> list[str]:
    """What each replica's log says of these instances (a failure's evidence)."""
    return [
        f"{name}: {line}"
        for name, world in replicas.items()
        for line in world.log.read_text(errors="replace").splitlines()
        if any(i in line for i in ids)
    ][-20:]
