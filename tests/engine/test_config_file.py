"""A new stack made without the CLI (its checkpoint as `pulumi stack init` writes it on a
self-managed backend) and config written without `pulumi config set-all` (the process's salt,
secrets encrypted here): the real CLI lists the stack and reads the secrets back; a file this
cannot open safely is left to the CLI."""

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from pulumi import automation as auto

from spotpool.engine.runs import config_file
from spotpool.engine.state import config_crypt
from spotpool.toolchain.paths import bin_dir
from tests.engine._support.fast_launch import PASSWORD, pool_stack, storm_config
from tests.engine.conftest import EngineWorld, count_cli_runs

pytestmark = pytest.mark.integration


def _cli(world: EngineWorld, work_dir: Path, *args: str) -> str:
    env = {
        **os.environ,
        "PATH": f"{bin_dir()}:{os.environ['PATH']}",
        "PULUMI_BACKEND_URL": world.settings.backend_url,
        "PULUMI_CONFIG_PASSPHRASE": world.settings.passphrase.get_secret_value(),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
    }
    done = subprocess.run(
        ["pulumi", *args], cwd=work_dir, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def test_a_new_stack_is_made_and_configured_with_no_cli_run_before_its_up(
    world: EngineWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = count_cli_runs(monkeypatch)
    first, second = pool_stack(world, "one"), pool_stack(world, "two")
    first.up(storm_config(world, first, 1), login_password=PASSWORD)
    assert commands == ["stack", "up"]  # a new backend: the CLI sets it up (its meta.yaml)
    second.up(storm_config(world, second, 1), login_password=PASSWORD)
    assert commands[2:] == ["up"]  # no `stack select --create`, no `config set-all`
    monkeypatch.undo()

    work_dir = world.settings.work_root / first.name
    settings = yaml.safe_load(config_file.settings_path(work_dir, first.name).read_text())
    passphrase = world.settings.passphrase.get_secret_value()
    assert settings["encryptionsalt"] == config_crypt.process_salt(passphrase)
    other = world.settings.work_root / second.name
    assert (
        yaml.safe_load(config_file.settings_path(other, second.name).read_text())["encryptionsalt"]
        == settings["encryptionsalt"]
    )  # one key derived for every stack the process made
    assert PASSWORD not in config_file.settings_path(work_dir, first.name).read_text()
    listed = _cli(world, work_dir, "stack", "ls", "--json")
    assert first.name in listed and second.name in listed  # as `pulumi stack init` makes them
    shown = _cli(world, work_dir, "config", "get", "spotpool:loginPassword", "-s", first.name)
    assert shown == PASSWORD  # the CLI decrypts what was encrypted here
    # and what the CLI encrypts, this decrypts
    _cli(world, work_dir, "config", "set", "--secret", "spotpool:probe", "s3cr3t", "-s", first.name)
    settings = yaml.safe_load(config_file.settings_path(work_dir, first.name).read_text())
    key = config_crypt.key_for(settings["encryptionsalt"], passphrase)
    assert config_crypt.decrypt(key, settings["config"]["spotpool:probe"]["secure"]) == "s3cr3t"


def test_a_file_of_another_passphrase_is_left_to_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.p.yaml"
    salt = config_crypt.process_salt("another install's passphrase")
    path.write_text(yaml.safe_dump({"encryptionsalt": salt, "config": {"spotpool:a": "1"}}))
    workspace = auto.LocalWorkspace.__new__(auto.LocalWorkspace)
    workspace.work_dir = str(tmp_path)
    stack = auto.Stack.__new__(auto.Stack)
    stack.name, stack.workspace = "p", workspace

    assert not config_file.write(stack, {"spotpool:a": "2"}, {"spotpool:pw": "x"}, "ours")
    assert yaml.safe_load(path.read_text())["config"] == {"spotpool:a": "1"}  # untouched
    assert config_file.write(stack, {"spotpool:a": "2"}, {}, "ours")  # plain needs no key
    assert yaml.safe_load(path.read_text())["config"] == {"spotpool:a": "2"}
    with pytest.raises(config_crypt.WrongPassphrase):
        config_crypt.key_for(salt, "ours")
