"""Write docs/cli.md, the flag reference, from the `spotpool` command line itself.

    python scripts/cli_reference.py            # rewrite docs/cli.md
    python scripts/cli_reference.py --check    # exit 1 when docs/cli.md is out of step

It walks the command tree typer builds (`typer.main.get_command`), asking each group for its
sub-commands with `list_commands` / `get_command` as the command line itself does when it runs
one, so sub-commands that are loaded only when asked for are found too. Each command's help,
usage, arguments and options come from the same objects `--help` prints. Defaults that hold a
path of this machine (the clone, the home directory) are written as `.` and `~`, so the page is
the same on every machine. tests/test_cli_reference.py keeps the committed page in step.
"""

import argparse
import inspect
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import typer
from typer._click.core import Command  # typer vendors click: its commands are these
from typer.core import TyperGroup

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli.md"
PROGRAM = "spotpool"
REGENERATE = "python scripts/cli_reference.py"


@dataclass(frozen=True)
class Entry:
    """One command of the tree: its words (`("spotpool", "operator", "run")`), the command,
    and the context `--help` would give it."""

    path: tuple[str, ...]
    command: Command
    context: typer.Context

    @property
    def name(self) -> str:
        return " ".join(self.path)

    @property
    def is_group(self) -> bool:
        return isinstance(self.command, TyperGroup)


def walk(app: typer.Typer, program: str = PROGRAM) -> Iterator[Entry]:
    """Every visible command of `app`, groups before their sub-commands, in `--help` order."""
    root = typer.main.get_command(app)
    yield from _walk((program,), root, typer.Context(root, info_name=program))


def _walk(path: tuple[str, ...], command: Command, context: typer.Context) -> Iterator[Entry]:
    yield Entry(path, command, context)
    if not isinstance(command, TyperGroup):
        return
    for name in command.list_commands(context):
        sub = command.get_command(context, name)
        if sub is None or sub.hidden:
            continue
        yield from _walk((*path, name), sub, typer.Context(sub, parent=context, info_name=name))


def _local_paths(text: str) -> str:
    """This machine's paths in a default, written as they read on any machine."""
    home = str(Path.home())
    state = os.environ.get("XDG_STATE_HOME")
    for local, shown in ((str(ROOT), "."), (state, "$XDG_STATE_HOME"), (home, "~")):
        if local and local != "/":
            text = text.replace(local, shown)
    return text


def _help(command: Command) -> str:
    """The command's help as `--help` shows it: click's form feed ends it, `\\b` marks are
    layout hints only."""
    text = inspect.cleandoc(command.help or "").split("\f", 1)[0]
    return "\n".join(line for line in text.splitlines() if line.strip() != "\b").strip()


def _outside_code(text: str) -> str:
    """`<` and `>` outside code spans as entities: a Markdown renderer would take
    `<instance-id>` for an HTML tag and drop it."""
    parts = text.split("`")
    for index in range(0, len(parts), 2):
        parts[index] = parts[index].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _cell(text: str) -> str:
    return _outside_code(" ".join(text.split())).replace("|", "\\|")


def _split_extra(help_text: str) -> tuple[str, str]:
    """typer's help record ends with `[env var: …; default: …; required]`: apart, as a column."""
    text = help_text.strip()
    if text.endswith("]"):
        if text.startswith("[") and "  [" not in text:
            return "", text[1:-1]
        head, marker, extra = text.rpartition("  [")
        if marker:
            return head, extra[:-1]
    return text, ""


def _extra(extra: str) -> str:
    """`env var: X; default: Y; 0<=x<=9; required` with the values as code."""
    shown = []
    for part in filter(None, extra.split("; ")):
        key, colon, value = part.partition(": ")
        if colon and key in ("env var", "default"):
            shown.append(f"{key} `{value}`")
        elif part == "required":
            shown.append("**required**")
        else:
            shown.append(f"`{part}`")
    return "; ".join(shown)


def _rows(entry: Entry) -> list[tuple[str, str, str]]:
    rows = []
    for param in entry.command.get_params(entry.context):
        record = param.get_help_record(entry.context)
        if record is None or param.name == "help":
            continue  # hidden, or the --help every command has
        flags, help_text = record
        meaning, extra = _split_extra(help_text)
        rows.append((f"`{_local_paths(flags)}`", meaning, _extra(_local_paths(extra))))
    return rows


def _table(rows: list[tuple[str, str, str]]) -> list[str]:
    lines = ["| argument or option | meaning | env var, default, bounds |", "|---|---|---|"]
    lines += [f"| {_cell(a)} | {_cell(b)} | {_cell(c)} |" for a, b, c in rows]
    return lines


def _anchor(name: str) -> str:
    return name.replace(" ", "-")


def _section(entry: Entry) -> list[str]:
    level = "##" if len(entry.path) <= 2 else "###"
    lines = [f"{level} {entry.name}", ""]
    help_text = _help(entry.command)
    if help_text:
        lines += [_outside_code(help_text), ""]
    rows = _rows(entry)
    if entry.is_group and not rows:
        return lines  # a group of sub-commands and nothing else: they follow
    usage = " ".join(entry.command.collect_usage_pieces(entry.context))
    lines += ["```text", f"{entry.name} {usage}".rstrip(), "```", ""]
    if rows:
        lines += [*_table(rows), ""]
    return lines


def render(app: typer.Typer, program: str = PROGRAM) -> str:
    """The whole page for `app`."""
    entries = list(walk(app, program))
    lines = [
        "# Command-line reference",
        "",
        f"<!-- Generated from the `{program}` command line by scripts/cli_reference.py: do not",
        f"     edit by hand. `{REGENERATE}` rewrites it, and",
        "     tests/test_cli_reference.py fails when it is out of step with the code. -->",
        "",
        f"Every `{program}` command with its arguments and options, as its `--help` gives them",
        "(every command also takes `--help`). An option with an env var can be set by that",
        "variable instead, which is how the install sets the operator's. Paths in defaults are",
        "written relative to the clone (`.`) and the home directory (`~`).",
        "",
    ]
    lines += [f"{'  ' * (len(e.path) - 2)}- [{e.name}](#{_anchor(e.name)})" for e in entries[1:]]
    lines.append("")
    for entry in entries:
        lines += _section(entry)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write docs/cli.md from the spotpool CLI.")
    parser.add_argument("--check", action="store_true", help="only check that it is in step")
    parser.add_argument("--output", type=Path, default=PAGE, help="where to write the page")
    args = parser.parse_args(argv)
    from spotpool.cli import app  # imported here: the module's helpers need no CLI loaded

    text = render(app)
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of step with the CLI: run `{REGENERATE}`")
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output} ({sum(1 for _ in walk(app)) - 1} commands)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
