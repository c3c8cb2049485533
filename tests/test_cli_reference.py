"""docs/cli.md is the command line's own reference: regenerated here, it must equal the
committed page, and the walk behind it finds every command, also ones a group loads lazily."""

from pathlib import Path

import pytest
import typer
from typer._click.core import Command
from typer.core import TyperGroup

from scripts.cli_reference import PAGE, REGENERATE, main, render, walk
from spotpool.cli import app

pytestmark = pytest.mark.unit


def test_docs_cli_md_is_in_step_with_the_command_line() -> None:
    assert PAGE.read_text() == render(app), f"docs/cli.md is out of step: run `{REGENERATE}`"


def test_every_command_and_option_is_on_the_page() -> None:
    """Not vacuous: the operator's flags, a group's sub-commands and the env vars are there."""
    page = render(app)
    names = [entry.name for entry in walk(app)]
    assert {"spotpool operator run", "spotpool emulator serve", "spotpool stacks keys"} <= set(
        names
    )
    for entry in walk(app):
        assert f"{'##' if len(entry.path) <= 2 else '###'} {entry.name}\n" in page, entry.name
    for flag in ("--full-refresh-every", "--secrets-provider", "--notice-url", "--api-limit"):
        assert f"`{flag} " in page
    assert "SPOTPOOL_REFRESH_INTERVAL" in page
    assert "--help`" not in page.split("(every command also takes `--help`)")[1]


def test_a_changed_flag_makes_the_check_fail(tmp_path: Path) -> None:
    stale = tmp_path / "cli.md"
    stale.write_text(render(app).replace("--full-refresh-every", "--refresh-every"))
    assert main(["--check", "--output", str(stale)]) == 1
    main(["--output", str(stale)])
    assert main(["--check", "--output", str(stale)]) == 0


class _LazyGroup(TyperGroup):
    """A group that builds its sub-commands only when asked for one, as a lazy CLI does:
    `commands` stays empty, so only list_commands/get_command find them."""

    def list_commands(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        return ["later"]

    def get_command(self, ctx: typer.Context, name: str) -> Command | None:  # type: ignore[override]
        if name != "later":
            return None
        loaded = typer.Typer()

        @loaded.command()
        def later(flag: int = typer.Option(3, help="Loaded on demand.")) -> None:
            """Run later."""

        return typer.main.get_command(loaded)


def test_sub_commands_loaded_on_demand_are_walked() -> None:
    lazy = typer.Typer(cls=_LazyGroup)

    @lazy.callback()
    def main_callback() -> None:
        """A lazy CLI."""

    page = render(lazy, "lazy")
    assert [entry.name for entry in walk(lazy, "lazy")] == ["lazy", "lazy later"]
    assert "## lazy later\n\nRun later." in page
    assert "| `--flag <int>` | Loaded on demand. | default `3` |" in page
