"""Nothing at the edges (issue 41, item 5): a Pulumi CLI process gets only the variables it
needs — not the operator's VAULT_TOKEN, web-identity token, cloud keys, other backends' keys,
or the passphrase when a file serves it — and a secret config value goes to the CLI on its
stdin, never on its command line. A stand-in `pulumi` records what it was given."""

import json
import os
import stat
from pathlib import Path
from typing import Any, cast

import pytest
from pulumi import automation as auto
from pydantic import SecretStr

from spotpool.engine.basics.settings import EngineSettings
from spotpool.engine.fencing.child_env import child_environment
from spotpool.engine.fencing.processes import FencedCommand
from spotpool.engine.runs import config_writer

pytestmark = pytest.mark.unit

SECRETS = {
    "VAULT_TOKEN": "hvs.operator-vault-token",
    "TKE_WEB_IDENTITY_TOKEN_FILE": "/var/run/secrets/tke/token",
    "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/secrets/eks/token",
    "TENCENTCLOUD_SECRET_KEY": "operator-own-secret-key",
    "AWS_SECRET_ACCESS_KEY": "backend-secret-key",
    "GOOGLE_APPLICATION_CREDENTIALS": "/secrets/gcp.json",
    "PULUMI_CONFIG_PASSPHRASE": "the-operators-passphrase",
    "PULUMI_ACCESS_TOKEN": "pul-token",
}


def _fake_pulumi(root: Path) -> Path:
    """A `pulumi` that writes its argv, environment and stdin to calls.jsonl."""
    binary = root / "bin" / "pulumi"
    binary.parent.mkdir(parents=True)
    binary.write_text(
        "#!/usr/bin/env python3\n"
        "import json, os, sys\n"
        "data = '' if sys.stdin.isatty() else sys.stdin.read()\n"
        f"with open({str(root / 'calls.jsonl')!r}, 'a') as f:\n"
        "    f.write(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ),"
        " 'stdin': data}) + '\\n')\n"
    )
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    return root / "calls.jsonl"


def _calls(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_runs_environment_holds_none_of_the_processs_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    calls = _fake_pulumi(tmp_path)
    run_env = {
        "PULUMI_CONFIG_PASSPHRASE_FILE": str(tmp_path / "passphrase"),
        "TENCENTCLOUD_SECRET_ID": "SPOTPOOLRUNPLACEHOLDER",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
    }
    FencedCommand(str(tmp_path)).run(["stack", "ls"], str(tmp_path), run_env)
    (call,) = _calls(calls)
    env = call["env"]
    for name, value in SECRETS.items():
        assert value not in env.values(), name
    assert env["PULUMI_CONFIG_PASSPHRASE_FILE"] == str(tmp_path / "passphrase")
    assert env["TENCENTCLOUD_SECRET_ID"] == "SPOTPOOLRUNPLACEHOLDER"
    assert str(tmp_path / "bin") in env["PATH"].split(":")


def test_backend_keys_only_for_the_backend_that_needs_them() -> None:
    process = {"AWS_SECRET_ACCESS_KEY": "s", "PULUMI_ACCESS_TOKEN": "t", "PATH": "/bin"}
    s3 = child_environment({}, "s3://state?region=x", [], "/nonexistent", process)
    assert s3.get("AWS_SECRET_ACCESS_KEY") == "s" and "PULUMI_ACCESS_TOKEN" not in s3
    fenced = child_environment(
        {"AWS_ACCESS_KEY_ID": "SPOTPOOLRUN01", "AWS_SECRET_ACCESS_KEY": "run-own"},
        "s3://state?endpoint=http://127.0.0.1:1",
        [],
        "/nonexistent",
        process,
    )
    assert fenced["AWS_SECRET_ACCESS_KEY"] == "run-own"
    local = child_environment({}, "file:///state", [], "/nonexistent", process)
    assert "AWS_SECRET_ACCESS_KEY" not in local and "PULUMI_ACCESS_TOKEN" not in local
    cloud = child_environment({}, "https://api.pulumi.com", [], "/nonexistent", process)
    assert cloud["PULUMI_ACCESS_TOKEN"] == "t"


def test_the_secrets_provider_gets_only_its_own_variables(tmp_path: Path) -> None:
    run_env = {"PULUMI_CONFIG_PASSPHRASE": "p", "VAULT_ADDR": "http://127.0.0.1:1",
               "VAULT_TOKEN": "key-service-token"}  # fmt: skip
    (tmp_path / "Pulumi.a.yaml").write_text("encryptionsalt: v1:abc\n")
    (tmp_path / "Pulumi.b.yaml").write_text(
        "secretsprovider: hashivault://spotpool\nencryptedkey: xyz\n"
    )
    passphrase = child_environment(run_env, "", ["up", "--stack", "a"], str(tmp_path), {})
    assert passphrase["PULUMI_CONFIG_PASSPHRASE"] == "p" and "VAULT_TOKEN" not in passphrase
    keyserver = child_environment(run_env, "", ["up", "--stack", "b"], str(tmp_path), {})
    assert keyserver["VAULT_TOKEN"] == "key-service-token"
    assert "PULUMI_CONFIG_PASSPHRASE" not in keyserver


def test_a_secret_config_value_goes_on_stdin_not_the_command_line(tmp_path: Path) -> None:
    calls = _fake_pulumi(tmp_path)
    workspace = auto.LocalWorkspace(
        work_dir=str(tmp_path), pulumi_command=FencedCommand(str(tmp_path)), env_vars={}
    )

    class _Stack:  # what set_through_cli uses of an auto.Stack
        name = "team-a.gpu"

        def __init__(self) -> None:
            self.workspace = workspace

        def set_all_config(self, values: dict[str, auto.ConfigValue]) -> None:
            workspace.set_all_config(self.name, values)

    secret = "notice-key-0123456789abcdef"
    values = {
        "spotpool:count": auto.ConfigValue("2"),
        "spotpool:noticeKey": auto.ConfigValue(secret, secret=True),
    }
    config_writer.set_through_cli(cast(auto.Stack, _Stack()), values)
    recorded = _calls(calls)
    assert all(secret not in " ".join(call["argv"]) for call in recorded)
    (secret_call,) = [c for c in recorded if "--secret" in c["argv"]]
    assert secret_call["argv"][-1] == "spotpool:noticeKey" and secret_call["stdin"] == secret


def test_a_passphrase_file_serves_the_runs(tmp_path: Path) -> None:
    exact = tmp_path / "exact"
    exact.write_text("k3J9-qLz8_wPx2Rt")
    settings = EngineSettings(
        backend_url="file:///x",
        passphrase=SecretStr("k3J9-qLz8_wPx2Rt"),
        passphrase_file=exact,
        work_root=tmp_path / "work",
    )
    assert settings.passphrase_env() == {"PULUMI_CONFIG_PASSPHRASE_FILE": str(exact)}
    mounted = tmp_path / "mounted"
    mounted.write_text("k3J9-qLz8_wPx2Rt\n")  # a Secret's file with a newline
    copy = settings.model_copy(update={"passphrase_file": mounted}).passphrase_env()
    path = Path(copy["PULUMI_CONFIG_PASSPHRASE_FILE"])
    assert path.read_text() == "k3J9-qLz8_wPx2Rt"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
