"""The proof that a young orphan is a killed run's outlives the repair that clears it, for real
(pulumi CLI, tencentcloud plugin, emulator).

A run killed mid-create leaves a pending create: the next operation's repair clears it (Pulumi
runs no more with it) and its slot's instance is adopted at once, young or not. When that
operation was a refresh ("adopted by the next up") or was itself killed, the next `up` found the
pending create gone, saw a young orphan with no proof and left it running beside a second
instance it made for the slot (tests/e2e/test_fencing_operators.py, a fresh-clone run)."""

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.emulator.harness import SECRET_ID, SECRET_KEY, wait_until
from tests.engine._support.killed_up import KILLED_UP
from tests.engine.conftest import EngineWorld

pytestmark = pytest.mark.integration


def test_a_killed_runs_instance_is_adopted_by_the_up_after_a_refresh_cleared_its_proof(
    world: EngineWorld,
) -> None:
    # Orphans young for the whole test: only the proof may adopt them early.
    world.settings = world.settings.model_copy(update={"orphan_min_age": 900})
    stack = world.pool()
    slow = {"Service": "cvm", "Action": "DescribeInstances", "Rate": 0.0, "LatencyMs": 1500}
    world.emulator.admin_ok("POST", "/_emulator/faults", slow)
    settings = json.loads(world.settings.model_dump_json())
    settings["passphrase"] = "engine-tests-passphrase"
    run = subprocess.Popen(
        [sys.executable, "-c", KILLED_UP, json.dumps(settings), stack.pool.model_dump_json(),
         SECRET_ID, SECRET_KEY],
        cwd=Path(__file__).parents[2], stdout=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    # Two made at least: the refresh below terminates one a pass, the up must find one left.
    made = lambda: len(world.cloud_instances(stack)) >= 2  # noqa: E731
    wait_until(made, "the killed run's first two instances", 120)
    tree = [psutil.Process(run.pid), *psutil.Process(run.pid).children(recursive=True)]
    for process in tree:
        process.kill()
    run.wait(timeout=30)
    psutil.wait_procs(tree, timeout=10)
    world.emulator.admin_ok("DELETE", "/_emulator/faults")

    refreshed = stack.refresh()  # the repair clears the pending creates here
    assert any("pending operation" in note for note in refreshed.recovered), refreshed.recovered
    # (with no config applied yet, the refresh terminates one a pass; the rest wait for the up)
    left = {i for i, state in world.cloud_instances(stack).items() if state == "RUNNING"}
    assert left, "the killed run left nothing for the next up to adopt"
    stack.dead_run_slots = frozenset()  # what another process (the next holder) would know

    result = stack.up(world.config(stack, 4))

    ids = sorted(i.instance_id for i in result.instances)
    assert left <= set(ids), (left, ids, result.recovered)  # adopted, not left beside a second
    wait_until(lambda: sorted(world.cloud_instances(stack)) == ids, "only the state's", 60)
