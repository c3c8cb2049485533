"""The `spotpool` command line imports a sub-command's package only when that sub-command runs,
while anything that walks the commands (the flag reference, completion) still sees them all."""

import os
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from spotpool.cli import LAZY_COMMANDS, app
from spotpool.lazy_commands import load

pytestmark = pytest.mark.unit

HEAVY = ("kopf", "pulumi", "pulumi_kubernetes", "spotpool_deploy", "spotpool_operator", "aiohttp")


def _imported_after(*args: str) -> set[str]:
    """Top-level packages loaded by `spotpool ARGS` in a fresh interpreter."""
    probe = (
        "import sys\n"
        "from spotpool.cli import app\n"
        "try:\n"
        f"    app({list(args)!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return set(done.stdout.split("\n")[-2].split())


@pytest.mark.parametrize("args", [["--help"], ["notice-agent", "--help"], ["--version"]])
def test_help_version_and_the_notice_agent_do_not_import_kopf_pulumi_or_deploy(
    args: list[str],
) -> None:
    loaded = _imported_after(*args)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_running_a_sub_command_imports_its_package() -> None:
    assert "spotpool_operator" in _imported_after("operator", "run", "--help")


def test_every_command_is_listed_and_loads_with_its_options() -> None:
    group = typer.main.get_command(app)
    context = typer.Context(group)
    names = group.list_commands(context)  # type: ignore[attr-defined]
    assert names == list(LAZY_COMMANDS)
    for name in names:
        command = group.get_command(context, name)  # type: ignore[attr-defined]
        assert command is not None and command.name == name
        assert command.params or hasattr(command, "commands"), name
    operator = group.get_command(context, "operator")  # type: ignore[attr-defined]
    run = operator.get_command(context, "run")
    assert "--metrics-port" in {opt for p in run.params for opt in p.opts}


@pytest.mark.parametrize("name", list(LAZY_COMMANDS))
def test_each_listed_help_line_is_the_commands_own(name: str) -> None:
    command = load(name, LAZY_COMMANDS[name])
    first = (command.help or "").strip().split("\n\n")[0].replace("\n", " ").strip()
    assert first == LAZY_COMMANDS[name].help


def test_the_help_page_lists_every_command_and_a_typo_gets_a_suggestion() -> None:
    runner = CliRunner()
    page = runner.invoke(app, ["--help"]).output
    for name in LAZY_COMMANDS:
        assert name in page
    typo = runner.invoke(app, ["notice-agnt"])
    assert typo.exit_code == 2 and "notice-agent" in typo.output


def test_version_names_the_package_version_revision_and_python() -> None:
    env = {**os.environ, "SPOTPOOL_REVISION": "0123456789ab"}
    done = subprocess.run(
        [sys.executable, "-m", "spotpool", "--version"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    python = ".".join(map(str, sys.version_info[:3]))
    assert done.stdout.strip() == f"spotpool 0.1.0 (revision 0123456789ab, Python {python})"
