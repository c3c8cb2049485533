"""The plain `pulumi` commands of docs/inspecting-stacks.md work on an engine-made stack."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.conftest import EngineWorld

pytestmark = pytest.mark.integration
ROOT = Path(__file__).parents[2]


def test_plain_pulumi_cli_reads_the_pool_stack(world: EngineWorld) -> None:
    stack = world.pool("gpu")
    up = stack.up(world.config(stack, 2))
    env = {
        **os.environ,
        "PULUMI_BACKEND_URL": world.settings.backend_url,
        "PULUMI_CONFIG_PASSPHRASE": "engine-tests-passphrase",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
    }
    pulumi = str(world.settings.tools_dir / "pulumi")

    def run(*args: str) -> str:
        done = subprocess.run(
            [pulumi, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert stack.name in run("stack", "ls")
    outputs = json.loads(run("stack", "output", "--stack", stack.name, "--json", "instances"))
    assert sorted(i["instanceId"] for i in outputs) == sorted(i.instance_id for i in up.instances)
    assert "update" in run("stack", "history", "--stack", stack.name)
    exported = json.loads(run("stack", "export", "--stack", stack.name))
    types = [r["type"] for r in exported["deployment"]["resources"]]
    assert types.count("tencentcloud:Instance/instance:Instance") == 2
    assert not list(ROOT.glob(f"Pulumi.{stack.name}.yaml"))  # nothing written in the checkout


def test_spotpool_stacks_ls_and_show(world: EngineWorld) -> None:
    stack = world.pool("gpu")
    up = stack.up(world.config(stack, 2))
    stack.refresh()
    env = {
        **os.environ,
        "SPOTPOOL_BACKEND_URL": world.settings.backend_url,
        "SPOTPOOL_WORK_DIR": str(world.settings.work_root),
        "PULUMI_CONFIG_PASSPHRASE": "engine-tests-passphrase",
        "COLUMNS": "200",
    }
    spotpool = str(Path(sys.executable).parent / "spotpool")
    listed = subprocess.run(
        [spotpool, "stacks", "ls"], env=env, capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0, listed.stderr
    assert "team-a/gpu" in listed.stdout and "refresh succeeded" in listed.stdout
    shown = subprocess.run(
        [spotpool, "stacks", "show", stack.name],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["uid"] == stack.pool.uid and view["lastRefresh"]["result"] == "succeeded"
    assert sorted(i["instanceId"] for i in view["instances"]) == sorted(
        i.instance_id for i in up.instances
    )
    missing = subprocess.run(
        [spotpool, "stacks", "show", "team-a.nope"], env=env, capture_output=True, text=True
    )
    assert missing.returncode != 0 and "no stack" in missing.stderr
