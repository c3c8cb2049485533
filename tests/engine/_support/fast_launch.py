"""Pools, configs and checks of the fast-launch tests: a pool with the real orphan rules, a
config that sets every field the provider turns into a RunInstances field, and the plain
`pulumi preview --expect-no-changes` a person runs on a stack."""

import os
import subprocess
import uuid
from pathlib import Path

from spotpool.api.notices import NoticeAgent
from spotpool.api.stackconfig import PoolIdentity, StackConfig
from spotpool.engine.stacks.stack import PoolStack
from spotpool.localworld.emulator import wait_until
from spotpool.localworld.engine import REGION, EngineWorld
from spotpool.toolchain.paths import bin_dir
from tests._support.tools import require_tool

ROOT = Path(__file__).parents[3]  # the repository: its Pulumi.yaml

AGENT = NoticeAgent(url="http://10.0.0.5:8090", command="spotpool notice-agent")


PASSWORD = "Sp0t-pool-pw!"


def storm_config(world: EngineWorld, stack: PoolStack, replicas: int) -> StackConfig:
    """Every input the program turns into a request field: user data with the notice agent,
    tags, ordered security groups, a spot price cap (and a password, given to each run)."""
    return world.config(
        stack,
        replicas,
        userData="#!/bin/sh\necho storm\n",
        tags={"team": "ml", "cost-center": "42"},
        securityGroupIds=["sg-bbb222", "sg-aaa111"],
        spotMaxPrice="2.5",
    ).model_copy(update={"notice_agent": AGENT})


def pool_stack(world: EngineWorld, name: str = "gpu") -> PoolStack:
    """A pool whose orphan rules are the real ones: an instance younger than 15 minutes may be
    another writer's create in flight (the test world sets 0), so only the launch intent can
    make a fast-path instance adoptable right away."""
    settings = world.settings.model_copy(update={"orphan_min_age": 900.0})
    identity = PoolIdentity(namespace="team-a", name=name, uid=str(uuid.uuid4()))
    return PoolStack(identity, settings, world.credentials, REGION, world.progress.append)


def pool_instances(world: EngineWorld, stack: PoolStack) -> dict[str, str]:
    """The pool's instances in the cloud: id -> state."""
    return world.cloud_instances(stack)


def up_and_reclaim(
    world: EngineWorld, stack: PoolStack, config: StackConfig, slot: int
) -> dict[int, str]:
    """Converge the pool, then have the cloud reclaim `slot`'s instance and wait until it is
    gone; slot -> the instances the up made."""
    first = {i.slot: i.instance_id for i in stack.up(config, login_password=PASSWORD).instances}
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [first[slot]]})
    wait_until(lambda: first[slot] not in pool_instances(world, stack), "the reclaim", timeout=30)
    return first


def preview_expecting_no_changes(world: EngineWorld, stack: PoolStack, tmp: Path) -> str:
    """`pulumi preview --expect-no-changes` as a person runs it on the stack (the config of
    its last update, the program through the language host)."""
    require_tool("pulumi-language-python")
    config_file = tmp / f"Pulumi.{stack.name}.yaml"
    env = {
        **os.environ,
        "PATH": f"{bin_dir()}:{os.environ['PATH']}",
        "PULUMI_BACKEND_URL": world.settings.backend_url,
        "PULUMI_CONFIG_PASSPHRASE": world.settings.passphrase.get_secret_value(),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_IGNORE_AMBIENT_PLUGINS": "true",
        "PULUMI_DIY_BACKEND_GZIP": "true",
        "PULUMI_DIY_BACKEND_DISABLE_CHECKPOINT_BACKUPS": "true",
        **world.credentials.provider_env(),
        "TENCENTCLOUD_REGION": REGION,
        "TENCENTCLOUD_PROTOCOL": "HTTP",
        "HTTP_PROXY": world.emulator.endpoint,
        "NO_PROXY": "127.0.0.1,localhost",
    }
    shown = ""
    for args in (["config", "refresh"], ["preview", "--expect-no-changes", "--diff"]):
        done = subprocess.run(
            ["pulumi", *args, "--stack", stack.name, "--config-file", str(config_file)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        shown = done.stdout
    return shown
