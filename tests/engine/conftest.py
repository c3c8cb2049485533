"""The real engine world: the pinned pulumi CLI and tencentcloud plugin, a file backend in a
temporary directory, and an emulator process standing in for Tencent Cloud."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pulumi import automation as auto
from pydantic import SecretStr

from spotpool.cluster import s3
from spotpool.engine.credentials import Credentials
from spotpool.engine.settings import EngineSettings
from spotpool.localworld.engine import REGION, EngineWorld, pool_spec
from tests.conftest import require_tool

__all__ = ["REGION", "EngineWorld", "pool_spec"]
from tests.emulator.harness import SECRET_ID, SECRET_KEY, start_emulator


@pytest.fixture
def world(tmp_path: Path) -> Iterator[EngineWorld]:
    yield from _world(tmp_path, f"file://{tmp_path / 'backend'}")


@pytest.fixture
def s3_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EngineWorld]:
    """The same world with its state in a real S3 server (versitygw) instead of a directory."""
    require_tool("versitygw")
    server = s3.start(tmp_path / "s3")
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)  # Pulumi's runs inherit them, as in a pod
    try:
        yield from _world(tmp_path, server.backend_url)
    finally:
        server.stop()


def _world(tmp_path: Path, backend_url: str) -> Iterator[EngineWorld]:
    require_tool("pulumi")
    require_tool("pulumi-resource-tencentcloud")
    emulator = start_emulator(tmp_path / "cloud.db", tmp_path / "emulator.log", boot_seconds=0)
    settings = EngineSettings(
        backend_url=backend_url,
        passphrase=SecretStr("engine-tests-passphrase"),
        work_root=tmp_path / "workspaces",
        cloud_endpoint=emulator.endpoint,
        # The tests make their strays by hand a moment before the sweep: no in-flight create
        # is theirs (tests/test_orphans.py covers the age rule, test_engine_emulator one case).
        orphan_min_age=0,
    )
    (tmp_path / "backend").mkdir()
    credentials = Credentials(secret_id=SecretStr(SECRET_ID), secret_key=SecretStr(SECRET_KEY))
    try:
        yield EngineWorld(emulator, settings, credentials, [])
    finally:
        emulator.stop()


def count_cli_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The command of every Pulumi CLI process the Automation API starts from now on."""
    commands: list[str] = []
    run = auto.PulumiCommand.run

    def counted(self: auto.PulumiCommand, args: list[str], *rest: Any, **kw: Any) -> Any:
        commands.append(args[0])
        return run(self, args, *rest, **kw)

    monkeypatch.setattr(auto.PulumiCommand, "run", counted)
    return commands
