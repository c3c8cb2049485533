"""A replica frozen mid-`up` for longer than its Lease, on a shared s3:// backend (issue 33,
path 3), as a paused VM or a stopped pod meets it: its whole process tree is stopped (SIGSTOP)
while its Pulumi CLI's RunInstances waits in the local API proxy for a token; the other replica
takes the shard over, breaks the lock and converges the pool; then the frozen tree is thawed.
The thawed run's queued RunInstances does not land (the emulator's request log), its checkpoint
save does not replace the new holder's (the state tracks exactly the running instances), the
pool ends whole and no lock is left."""

import json
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psutil
import pytest

from spotpool.api.stackconfig import PROJECT
from spotpool.engine.state.backend_files import ROOT, latest_deployment, open_backend
from tests.e2e._support.replicas import Replicas
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = [pytest.mark.e2e, pytest.mark.heavy]
LEASE = 6.0  # OperatorWorld's SPOTPOOL_LEASE_DURATION
# RunInstances refills one token in 20 s (0.05/s; halved between two replicas, burst 1/2): the
# scale-up's call, a few seconds after the first one, waits in the replica's proxy long enough
# to freeze the replica while it is queued there.
API_LIMITS = "RunInstances=0.05"
WRITES = ("RunInstances", "TerminateInstances")
INSTANCE_TYPE = "tencentcloud:Instance/instance:Instance"


@contextmanager
def frozen(world: OperatorWorld) -> Iterator[list[psutil.Process]]:
    """The replica's whole process tree stopped (the operator, its CLIs, their plugins)."""
    assert world.process is not None
    root = psutil.Process(world.process.pid)
    tree = [root, *root.children(recursive=True)]
    for process in tree:
        process.send_signal(signal.SIGSTOP)
    try:
        yield tree
    finally:
        for process in tree:
            with suppress(psutil.Error):
                process.send_signal(signal.SIGCONT)


def _queued_run_instances(world: OperatorWorld) -> bool:
    """A RunInstances waits for its token in the replica's proxy (its bucket is empty)."""
    found = re.search(
        r'^spotpool_cloud_api_bucket_fill_ratio\{[^}]*action="RunInstances"[^}]*\} (\S+)$',
        world.metrics(),
        re.MULTILINE,
    )
    return found is not None and float(found.group(1)) == 0.0


def _ends(world: OperatorWorld, stack: str, after: int) -> bool:
    text = world.log.read_bytes()[after:].decode(errors="replace")
    return re.search(rf"\] \w+ of {re.escape(stack)} ends$", text, re.MULTILINE) is not None


@pytest.fixture
def replica_options() -> dict[str, Any]:
    env = {"SPOTPOOL_API_LIMITS": API_LIMITS}
    return {"shards": 1, "s3_backend": True, "namespace_prefix": "frozen-", "env": env}


def test_a_replica_frozen_mid_up_past_its_lease_writes_nothing_after_the_thaw(
    replicas: Replicas,
) -> None:
    emulator, server = replicas.emulator, replicas.server
    assert server is not None
    files = open_backend(server.backend_url, server.env)
    assert files is not None
    a = replicas.start("a")
    ns = a.namespace()
    a.apply(ns, pool_manifest("gpu", replicas=1))
    uid = a.wait_ready(ns, "gpu", 1, timeout=300)["metadata"]["uid"]
    stack = f"{ns}.gpu"
    b = replicas.start("b")  # joins; the one shard stays A's (its share)

    b_before = len(b.log.read_bytes())
    a.kube.ok("-n", ns, "patch", "spotpool", "gpu", "--type=merge",
              "-p", json.dumps({"spec": {"replicas": 2}}))  # fmt: skip
    a.wait_until(lambda: _queued_run_instances(a), "A's RunInstances queued", 120)
    with frozen(a):
        # Past A's Lease: B takes the shard, breaks A's lock and converges the pool.
        b.wait_ready(ns, "gpu", 2, timeout=240)
        b.wait_until(lambda: _ends(b, stack, b_before), "B's run on the stack ends", 60)
        thawed_at = len(emulator.admin_ok("GET", "/_emulator/requests")["Requests"])
        a_before = len(a.log.read_bytes())
    # Thawed: A's run goes on where it stopped, and ends.
    a.wait_until(lambda: _ends(a, stack, a_before), "A's run on the stack ends", 120)
    a.wait_until(lambda: not files.keys(f"{ROOT}/locks/"), "no lock left", 60)

    late = [
        (c["Action"], c["Code"])
        for c in emulator.admin_ok("GET", "/_emulator/requests")["Requests"][thawed_at:]
        if c["Action"] in WRITES
    ]
    assert late == [], f"the thawed replica's cloud writes landed: {late}"
    state = latest_deployment(files, PROJECT, stack) or {}
    tracked = sorted(
        str(r["id"]) for r in state.get("resources") or [] if r.get("type") == INSTANCE_TYPE
    )
    running = sorted(i for i, s in a.cloud(uid).items() if s == "RUNNING")
    print(f"\nstate tracks {tracked}; the cloud runs {running}; A refused: "
          f"{a.log.read_text(errors='replace').count(' refused: ')} call(s)")  # fmt: skip
    assert tracked == running, "the stack lost track of a running instance"
    pool = b.wait_ready(ns, "gpu", 2, timeout=120)
    assert sorted(i["instanceId"] for i in pool["status"]["instances"]) == running
