"""A Pulumi run whose writer loses the pool's shard mid-`up` (issue 33, path 3), on a real S3
backend with the real CLI, provider and emulator: the new holder breaks its lock and saves the
checkpoint; the old run, going on, saves nothing over it and sends the cloud nothing more — its
provider's calls are refused by the API proxy, its saves by the fencing S3 proxy."""

import os
import threading
import time

import pytest

from spotpool.api.stackconfig import PROJECT
from spotpool.engine.fencing import s3_fence
from spotpool.engine.fencing.processes import fenced
from spotpool.engine.state.backend_files import ROOT, open_backend
from spotpool.engine.tencent import api_proxy
from tests.engine.conftest import EngineWorld

pytestmark = pytest.mark.integration
SLOW_LOOKS = {"Service": "cvm", "Action": "DescribeInstances", "Rate": 0.0, "LatencyMs": 1500}
WRITES = ("RunInstances", "TerminateInstances")


class Shard:
    """The old holder's right to write, as its shard's fence says it."""

    def __init__(self) -> None:
        self.held = True

    def check(self) -> None:
        if not self.held:
            raise RuntimeError("shard 0 (token 1) is no longer held by this replica")


def _calls(world: EngineWorld) -> list[dict[str, object]]:
    return list(world.emulator.admin_ok("GET", "/_emulator/requests")["Requests"])


def test_a_run_that_lost_its_shard_mid_up_saves_nothing_and_calls_nothing(
    s3_world: EngineWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = s3_world
    monkeypatch.setenv("PULUMI_DIY_BACKEND_GZIP", "true")  # the new holder saves as ours do
    stack = world.pool()
    stack.up(world.config(stack, 1))
    files = open_backend(world.settings.backend_url)
    assert files is not None
    checkpoint = f"{ROOT}/stacks/{PROJECT}/{stack.name}.json.gz"
    world.emulator.admin_ok("POST", "/_emulator/faults", SLOW_LOOKS)
    seen = len(_calls(world))
    shard, outcome = Shard(), []

    def old_holder() -> None:
        with fenced(shard.check):
            try:
                stack.up(world.config(stack, 2))
                outcome.append("converged")
            except Exception as error:  # the run fails: what it said is checked below
                outcome.append(str(error))

    run = threading.Thread(target=old_holder)
    run.start()
    deadline = time.monotonic() + 120
    while not any(c["Action"] == "RunInstances" for c in _calls(world)[seen:]):
        assert time.monotonic() < deadline, "the old holder's up sent no RunInstances"
        time.sleep(0.2)

    # The shard goes to another replica, which breaks the old run's lock (an earlier holder's)
    # and saves the checkpoint.
    shard.held = False
    taken_over = len(_calls(world))
    for lock in files.keys(f"{ROOT}/locks/"):
        files.delete(lock)
    exported = world.pulumi(stack, "stack", "export")
    imported = world.settings.work_root / "new-holder.json"
    imported.write_text(exported)
    world.pulumi(stack, "stack", "import", "--file", str(imported), "--force")
    new_holders = files.read(checkpoint)
    world.emulator.admin_ok("DELETE", "/_emulator/faults")

    run.join(timeout=180)
    assert not run.is_alive()
    assert outcome and outcome[0] != "converged", outcome
    assert files.read(checkpoint) == new_holders, "the old run saved over the new holder"
    assert files.keys(f"{ROOT}/locks/") == [], "a lock was left"
    late = [c for c in _calls(world)[taken_over:] if c["Action"] in WRITES]
    assert late == [], f"the old run's cloud writes landed after the takeover: {late}"
    refused = api_proxy.proxy_for(world.settings.cloud_endpoint).refused + sum(
        fence.refused + fence.late_saves for fence in s3_fence._fences.values()
    )
    assert refused > 0, "nothing was refused: the old run never reached the fences"


def test_a_fenced_run_that_keeps_its_shard_converges_through_both_fences(
    s3_world: EngineWorld,
) -> None:
    world = s3_world
    stack = world.pool()
    refused_before = api_proxy.proxy_for(world.settings.cloud_endpoint).refused
    with fenced(lambda: None):
        result = stack.up(world.config(stack, 2))
        again = stack.up(world.config(stack, 2))  # the saved state read back: nothing to do
    assert len(result.instances) == 2
    assert not (again.changes.create or again.changes.delete or again.changes.update)
    assert sorted(i.instance_id for i in result.instances) == sorted(world.cloud_instances(stack))
    files = open_backend(world.settings.backend_url)
    assert files is not None and files.keys(f"{ROOT}/locks/") == []
    fence = s3_fence._fences[(world.settings.backend_url, os.environ["AWS_ACCESS_KEY_ID"])]
    assert fence.runs == {} and fence.refused == 0 and fence.late_saves == 0
    assert api_proxy.proxy_for(world.settings.cloud_endpoint).refused == refused_before
