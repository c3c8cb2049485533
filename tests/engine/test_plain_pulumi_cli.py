"""The plain `pulumi` commands of docs/inspecting-stacks.md work on an engine-made stack."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spotpool.localworld.emulator import wait_until
from spotpool.toolchain.paths import bin_dir
from tests.conftest import require_tool
from tests.engine.conftest import REGION, EngineWorld

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


def test_plain_pulumi_runs_the_program_through_the_language_host(
    world: EngineWorld, tmp_path: Path
) -> None:
    """docs/inspecting-stacks.md, "Previewing and changing a stack by hand": the config from the
    last update, a preview with no changes, a reclaim found by a hand-typed `pulumi refresh`,
    and a hand-typed `pulumi up` (the pool paused) recreating the slot. The real CLI runs
    stacks/spotpool through the Python language host built from its local source."""
    require_tool("pulumi-language-python")
    stack = world.pool("by-hand")
    first = {i.slot: i.instance_id for i in stack.up(world.config(stack, 2)).instances}
    config_file = tmp_path / f"Pulumi.{stack.name}.yaml"  # not in the checkout
    env = {
        **os.environ,
        "PATH": f"{bin_dir()}:{os.environ['PATH']}",  # `eval "$(spotpool toolchain env)"`
        "PULUMI_BACKEND_URL": world.settings.backend_url,
        "PULUMI_CONFIG_PASSPHRASE": world.settings.passphrase.get_secret_value(),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_IGNORE_AMBIENT_PLUGINS": "true",  # the host beside the CLI, plugins registered
        # The backend as the operator keeps it: gzip checkpoints, no backup copies.
        "PULUMI_DIY_BACKEND_GZIP": "true",
        "PULUMI_DIY_BACKEND_DISABLE_CHECKPOINT_BACKUPS": "true",
        **world.credentials.provider_env(),
        "TENCENTCLOUD_REGION": REGION,
        # The emulator is the cloud, reached as an HTTP proxy; the program's gRPC calls to the
        # engine on loopback must not go through it.
        "TENCENTCLOUD_PROTOCOL": "HTTP",
        "HTTP_PROXY": world.emulator.endpoint,
        "NO_PROXY": "127.0.0.1,localhost",
    }

    def pulumi(*args: str) -> str:
        config = [] if args[0] == "stack" else ["--config-file", str(config_file)]
        done = subprocess.run(
            ["pulumi", *args, "--stack", stack.name, *config],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "warning" not in done.stdout + done.stderr, done.stdout + done.stderr
        return done.stdout

    pulumi("config", "refresh")
    assert "spotpool:pool" in config_file.read_text()
    shown = pulumi("preview", "--expect-no-changes", "--diff")  # fails on any change
    assert "4 unchanged" in shown, shown  # the stack, the pool component, its 2 instances

    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [first[1]]})
    wait_until(lambda: first[1] not in world.cloud_instances(stack), "the reclaim", timeout=30)
    refreshed = pulumi("refresh", "--yes", "--diff", "--skip-preview")
    assert "-slot-1" in refreshed and "deleted" in refreshed, refreshed
    assert sorted(_recorded(pulumi("stack", "export"))) == [first[0]]

    pulumi("up", "--yes", "--skip-preview")
    stacks = Path(world.settings.backend_url.removeprefix("file://"), ".pulumi/stacks/spotpool")
    # The checkpoint stays as the operator keeps it (gzip), and no backup copy is added.
    assert not (stacks / f"{stack.name}.json").exists()
    assert not (stacks / f"{stack.name}.json.bak").exists()
    assert (stacks / f"{stack.name}.json.gz").exists()
    now = _recorded(pulumi("stack", "export"))
    assert len(now) == 2 and first[0] in now and first[1] not in now
    assert sorted(world.cloud_instances(stack)) == sorted(now)
    # The engine agrees: its own refresh finds nothing gone.
    assert stack.refresh().gone_slots == []
    assert not list(ROOT.glob(f"Pulumi.{stack.name}.yaml"))


def _recorded(exported: str) -> list[str]:
    """Instance ids in a `pulumi stack export`."""
    resources = json.loads(exported)["deployment"]["resources"]
    return [
        r["outputs"]["id"]
        for r in resources
        if r["type"] == "tencentcloud:Instance/instance:Instance" and "outputs" in r
    ]
