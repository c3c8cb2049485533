"""The `keyserver` secrets provider (engine/state/keyserver.py): stacks whose data key the process's
key service on loopback unwraps, so no Pulumi run derives a passphrase key. The real CLI and
plugin open them (`hashivault://spotpool`), a secret written without the CLI reads back
through the plain CLI, and a person gets the same keys from `spotpool stacks keys`."""

import gzip
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from spotpool.api.stackconfig import PoolIdentity
from spotpool.engine.stacks.stack import PoolStack
from spotpool.engine.state import keyserver
from tests.engine.conftest import REGION, EngineWorld, count_cli_runs

USER_DATA = "IyEvYmluL3NoCmVjaG8ga2V5c2VydmVyCg=="  # a secret in the stack's config


def _call(address: str, token: str, verb: str, body: dict[str, str]) -> dict[str, str]:
    request = urllib.request.Request(
        f"{address}/v1/transit/{verb}/{keyserver.KEY_NAME}",
        data=json.dumps(body).encode(),
        headers={"X-Vault-Token": token},
        method="PUT",
    )
    # A deadlock breaker, not a time bound: the first call derives the key (PBKDF2), slow on
    # a loaded machine.
    with urllib.request.urlopen(request, timeout=60) as reply:
        data: dict[str, str] = json.load(reply)["data"]
        return data


@pytest.mark.unit
def test_the_key_service_wraps_and_unwraps_only_for_its_token() -> None:
    service = keyserver.KeyService("a passphrase")
    try:
        env = service.env()
        assert env["VAULT_ADDR"].startswith("http://127.0.0.1:")
        sealed = _call(env["VAULT_ADDR"], env["VAULT_TOKEN"], "encrypt", {"plaintext": "a2V5"})
        assert sealed["ciphertext"].startswith("vault:v1:")
        opened = _call(env["VAULT_ADDR"], env["VAULT_TOKEN"], "decrypt", sealed)
        assert opened["plaintext"] == "a2V5"
        with pytest.raises(urllib.error.HTTPError) as refused:
            _call(env["VAULT_ADDR"], "not-the-token", "decrypt", sealed)
        assert refused.value.code == 403
    finally:
        service.close()
    other = keyserver.master_key("another passphrase")
    with pytest.raises(keyserver.WrongKey):
        keyserver.unwrap(other, sealed["ciphertext"])
    key = keyserver.process_key("a passphrase")
    assert len(keyserver.data_key("a passphrase", key)) == 32


@pytest.mark.integration
def test_keyserver_stacks_run_without_a_passphrase_key_and_read_back_with_the_plain_cli(
    world: EngineWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.settings = world.settings.model_copy(update={"secrets_provider": "keyserver"})

    def pool(name: str) -> PoolStack:
        identity = PoolIdentity(namespace="team-k", name=name, uid=str(uuid.uuid4()))
        return PoolStack(identity, world.settings, world.credentials, REGION)

    first = pool("first")
    first.up(world.config(first, 1))  # the CLI sets the backend up (its meta.yaml)
    commands = count_cli_runs(monkeypatch)
    second = pool("second")
    made = second.up(world.config(second, 2, userData=USER_DATA))
    assert commands == ["up"]  # made without the CLI, opened by the key service
    assert len(made.instances) == 2 == len(world.cloud_instances(second))

    settings_file = yaml.safe_load(
        (world.settings.work_root / second.name / f"Pulumi.{second.name}.yaml").read_text()
    )
    assert settings_file["secretsprovider"] == keyserver.URL
    assert "encryptionsalt" not in settings_file
    assert set(settings_file["config"]["spotpool:userData"]) == {"secure"}
    backend = Path(world.settings.backend_url.removeprefix("file://"))
    checkpoint = next(backend.rglob(f"{second.name}.json.gz"))
    latest = json.loads(gzip.decompress(checkpoint.read_bytes()))["checkpoint"]["latest"]
    assert latest["secrets_providers"]["type"] == "cloud"
    assert world.settings.passphrase.get_secret_value() not in checkpoint.read_text(errors="ignore")

    # The secret written into the settings file without the CLI reads back through it.
    assert world.pulumi(second, "config", "get", "spotpool:userData").strip() == USER_DATA

    # A person's plain CLI, with the keys `spotpool stacks keys` serves from the passphrase.
    passphrase = world.settings.passphrase.get_secret_value()
    serving = subprocess.Popen(
        [sys.executable, "-m", "spotpool", "stacks", "keys"],
        env={**os.environ, "PULUMI_CONFIG_PASSPHRASE": passphrase},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert serving.stdout is not None
        exports = dict(p.split("=", 1) for p in serving.stdout.readline().split()[1:])
        person = {
            **os.environ,
            **exports,
            "PULUMI_BACKEND_URL": world.settings.backend_url,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
        }
        person.pop("PULUMI_CONFIG_PASSPHRASE", None)
        shown = subprocess.run(
            [str(world.settings.tools_dir / "pulumi"), "config", "get", "spotpool:userData",
             "--stack", second.name],
            cwd=world.settings.work_root / second.name, env=person,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.strip() == USER_DATA
    finally:
        serving.terminate()
        serving.wait(10)
