"""`spotpool toolchain install` with every tool cached says so: no build time of an earlier run
beside this run's total."""

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from spotpool.toolchain import cli
from spotpool.toolchain.install import BUILT, InstallRecord, Obtained

pytestmark = pytest.mark.unit


def test_cached_tools_show_no_old_build_time(monkeypatch: pytest.MonkeyPatch) -> None:
    built = sorted(BUILT)[0]

    def cached(tool: Any, say: Any, local_source: Path | None = None) -> Obtained:
        record = InstallRecord(name=tool.name, version=tool.version, source=built, seconds=411.0)
        return Obtained(record=record, placed=True)

    monkeypatch.setattr(cli, "obtain", cached)
    monkeypatch.setattr(cli.console, "width", 200)
    result = CliRunner().invoke(cli.app, ["install", "pulumi"])
    assert result.exit_code == 0, result.output
    assert "411.0" not in result.output
    assert "cached" in result.output
