"""The real engine world: the pinned pulumi CLI and tencentcloud plugin, a file backend in a
temporary directory, and an emulator process standing in for Tencent Cloud."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spotpool.cluster import s3
from spotpool.engine.fencing.processes import FencedCommand
from spotpool.localworld.engine import REGION, EngineWorld, pool_spec
from tests.conftest import require_tool
from tests.engine._support.worlds import engine_world, s3_backend

__all__ = ["REGION", "EngineWorld", "pool_spec"]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[EngineWorld]:
    require_tool("pulumi")
    require_tool("pulumi-resource-tencentcloud")
    with engine_world(tmp_path, f"file://{tmp_path / 'backend'}") as made:
        yield made


@pytest.fixture
def s3_world(
    tmp_path: Path, s3_server: s3.LocalS3, monkeypatch: pytest.MonkeyPatch
) -> Iterator[EngineWorld]:
    """The same world with its state in a real S3 server (versitygw) instead of a directory."""
    require_tool("pulumi")
    require_tool("pulumi-resource-tencentcloud")
    with engine_world(tmp_path, s3_backend(s3_server, monkeypatch)) as made:
        yield made


def count_cli_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The command of every Pulumi CLI process the Automation API starts from now on."""
    commands: list[str] = []
    run = FencedCommand._run  # where every launch of the engine's CLI goes

    def counted(self: FencedCommand, args: list[str], *rest: Any, **kw: Any) -> Any:
        commands.append(args[0])
        return run(self, args, *rest, **kw)

    monkeypatch.setattr(FencedCommand, "_run", counted)
    return commands
