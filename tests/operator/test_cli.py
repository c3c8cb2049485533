"""`spotpool operator run` refuses bad flags before it talks to anything."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotpool.cli import app

pytestmark = pytest.mark.unit


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("PULUMI_CONFIG_PASSPHRASE", "SPOTPOOL_PASSPHRASE", "SPOTPOOL_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "400")  # rich's error box wraps at the terminal's width
    return CliRunner()


def test_no_passphrase_says_where_to_put_one(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["operator", "run", "--backend", f"file://{tmp_path}"])
    assert result.exit_code != 0
    assert "PULUMI_CONFIG_PASSPHRASE" in result.output


def test_namespace_and_all_namespaces_exclude_each_other(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["operator", "run", "-n", "a", "--all-namespaces", "--backend", f"file://{tmp_path}"],
        env={"PULUMI_CONFIG_PASSPHRASE": "a-long-passphrase-for-tests"},
    )
    assert result.exit_code != 0
    assert "not both" in result.output


def test_bad_refresh_interval(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["operator", "run", "--backend", f"file://{tmp_path}"],
        env={
            "PULUMI_CONFIG_PASSPHRASE": "a-long-passphrase-for-tests",
            "SPOTPOOL_REFRESH_INTERVAL": "soon",
        },
    )
    assert result.exit_code != 0
    assert "refresh-interval" in result.output


def test_empty_passphrase_file(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "pass").write_text("\n")
    result = runner.invoke(
        app,
        ["operator", "run", "--backend", f"file://{tmp_path}",
         "--passphrase-file", str(tmp_path / "pass")],
    )  # fmt: skip
    assert result.exit_code != 0
    # typer's error box wraps the message at the terminal's width (a long tmp path moves it)
    assert "is empty" in " ".join(result.output.replace("│", " ").split())


def test_a_weak_passphrase_is_refused_with_a_clear_error(runner: CliRunner, tmp_path: Path) -> None:
    """Issue 41: the passphrase guards the state and, by default, the notice tokens."""
    for weak in ("x", "short-pass", "aaaaaaaabbbbbbbbcccc"):
        result = runner.invoke(
            app,
            ["operator", "run", "--backend", f"file://{tmp_path}"],
            env={"PULUMI_CONFIG_PASSPHRASE": weak},
        )
        assert result.exit_code != 0
        assert "passphrase is weak" in " ".join(result.output.replace("│", " ").split())
