"""Every `--flag` that README.md, SECURITY.md, CHANGELOG.md and docs/*.md name exists in the
`--help` of its command.

A flag written in a command line (a code block, or an inline code span that starts with the
command) is checked against that command's own help: `spotpool <group> <command>`, `python -m
spotpool_deploy <command>` (the deploy CLI) or `bench/<script>.py`. A flag named in prose, with
no command beside it, must be a flag of some spotpool command, or one of the other tools' flags
listed in OTHER_TOOLS. Other tools' command lines (pulumi, kubectl, helm, docker, ...) are not
checked. No toolchain needed: the help comes from the CLI objects and `python SCRIPT --help`.
"""

import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import typer
from spotpool_deploy.cli import app as deploy_app
from typer.testing import CliRunner

from scripts.cli_reference import Entry, walk
from spotpool.cli import app as spotpool_app

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
DOCS = [
    *(ROOT / name for name in ("README.md", "SECURITY.md", "CHANGELOG.md")),
    *sorted((ROOT / "docs").glob("*.md")),
]

# Flags of other tools that the docs name in prose, and whose they are.
OTHER_TOOLS = {
    "--show-secrets": "pulumi stack export",
    "--randomly-seed": "pytest (pytest-randomly)",
    "--slowest-modules": "pytest (tests/conftest.py)",
    "--dist": "pytest (pytest-xdist)",
    "--target": "pulumi up",
    "--refresh": "pulumi up",
    "--create-namespace": "helm install",
    "--reuse-values": "helm upgrade",
    "--include-crds": "helm template",
    "--strict": "helm lint",
    "--diff": "pulumi preview",
    "--expect-no-changes": "pulumi preview",
    "--path": "pulumi config set",
    "--config-file": "pulumi (every stack command)",
    "--preview-only": "pulumi refresh",
    "--skip-preview": "pulumi refresh / up",
    "--yes": "pulumi refresh / up",
    "--skip-crds": "helm install",
    "--server-side": "kubectl apply",
    "--force-conflicts": "kubectl apply",
    "--node-labels": "kubelet (a node join)",
}

# Other tools whose command lines the docs show (their flags are theirs, not checked here).
OTHER_PROGRAMS = {
    "pulumi",
    "kubectl",
    "helm",
    "docker",
    "go",
    "kube-apiserver",
    "etcd",
    "make",
    "pytest",
    "setpriv",
    "podman",
    "buildah",
    "debootstrap",
}

FENCE = re.compile(r"^\s*```")
SPAN = re.compile(r"`([^`]+)`")
FLAG = re.compile(r"--[a-z][a-z0-9-]*")
BOUNDARIES = {"|", "||", "&&", ";", "(", ")"}
ROOTS: dict[str, typer.Typer] = {"spotpool": spotpool_app, "spotpool_deploy": deploy_app}


@dataclass(frozen=True)
class Mention:
    doc: str
    line: int
    flag: str
    command: tuple[str, ...] | None  # ("spotpool", "operator", "run"), ("bench/x.py",), None

    def __str__(self) -> str:
        where = " ".join(self.command) if self.command else "prose"
        return f"{self.doc}:{self.line}: {self.flag} ({where})"


def _flag(token: str) -> str | None:
    match = FLAG.match(token.lstrip("[(\"'`"))
    return match.group(0) if match else None


@cache
def _tree(root: str) -> dict[tuple[str, ...], Entry]:
    """Every command of a root by its words, found as the command line finds them (a group's
    `list_commands` / `get_command`: sub-commands loaded only when run are found too)."""
    return {entry.path: entry for entry in walk(ROOTS[root], root)}


def _program(tokens: list[str], at: int) -> tuple[tuple[str, ...] | None, int]:
    """The command starting at tokens[at] (None: another tool) and where its arguments begin."""
    word = tokens[at].lstrip("\"'$(`")
    name = word.rsplit("/", 1)[-1]
    if name == "spotpool":
        root, start = "spotpool", at + 1
    elif re.fullmatch(r"python[0-9.]*", name) and tokens[at + 1 : at + 3] == [
        "-m",
        "spotpool_deploy",
    ]:
        root, start = "spotpool_deploy", at + 3
    elif re.fullmatch(r"(\S*/)?bench/\w+\.py", word):
        return ("bench/" + name,), at + 1
    elif re.fullmatch(r"python[0-9.]*", name) and at + 1 < len(tokens):
        script = tokens[at + 1]
        if re.fullmatch(r"(\S*/)?bench/\w+\.py", script):
            return ("bench/" + script.rsplit("/", 1)[-1],), at + 2
        return None, at + 1
    else:
        return None, at + 1
    path: tuple[str, ...] = (root,)
    tree = _tree(root)
    while start < len(tokens) and (*path, tokens[start]) in tree:
        path, start = (*path, tokens[start]), start + 1
    return path, start


def _command_line(text: str, doc: str, line: int) -> Iterator[Mention]:
    """Flags of the spotpool, deploy and bench commands in one (joined) shell line."""
    text = re.sub(r"(^|\s)#.*$", "", text)  # a comment
    text = re.sub(r"\[[^\]]*\]", lambda m: m.group(0).replace("|", " "), text)  # [-n NS | -A]
    tokens = text.replace("$(", " ( ").replace(")", " ) ").split()
    command: tuple[str, ...] | None = None
    at, start = 0, True
    while at < len(tokens):
        token = tokens[at]
        if token in BOUNDARIES or token.startswith("$("):
            start, at = True, at + 1
            continue
        if start and "=" in token and not token.startswith("-"):
            at += 1  # VAR=value before a command
            continue
        if start:
            command, at = _program(tokens, at)
            start = False
            continue
        flag = _flag(token)
        if flag and command is not None:
            yield Mention(doc, line, flag, command)
        at += 1


def _is_command(span: str) -> bool:
    """A span that starts with a command: ours (checked) or another tool's (not checked)."""
    tokens = span.split()
    if not tokens:
        return False
    return tokens[0].rsplit("/", 1)[-1] in OTHER_PROGRAMS or _program(tokens, 0)[0] is not None


def mentions(path: Path) -> Iterator[Mention]:
    doc = str(path.relative_to(ROOT))
    lines = path.read_text().splitlines()
    prose: list[tuple[int, str]] = []
    fenced, number = False, 0
    while number < len(lines):
        text = lines[number]
        if FENCE.match(text):
            fenced, number = not fenced, number + 1
            continue
        if not fenced:
            prose.append((number + 1, text))
            number += 1
            continue
        first = number + 1
        # one logical line: `\` continuations, and indented `[--flag ...]` continuations
        while number + 1 < len(lines) and (
            text.rstrip().endswith("\\") or re.match(r"\s+\[--", lines[number + 1])
        ):
            number += 1
            text = text.rstrip().removesuffix("\\") + " " + lines[number].strip()
        yield from _command_line(text, doc, first)
        number += 1
    yield from _prose(prose, doc)


def _prose(prose: list[tuple[int, str]], doc: str) -> Iterator[Mention]:
    text = "\n".join(line for _, line in prose)
    starts = [number for number, _ in prose]

    def line_of(offset: int) -> int:
        return starts[text.count("\n", 0, offset)]

    for match in SPAN.finditer(text):
        span = match.group(1).replace("\n", " ")
        if _is_command(span):
            yield from _command_line(span, doc, line_of(match.start()))
        else:
            for flag in FLAG.findall(span):
                yield Mention(doc, line_of(match.start()), flag, None)
    outside = SPAN.sub(lambda m: " " * len(m.group(0)), text)
    for match in re.finditer(r"(?<![\w-])--[a-z][a-z0-9-]*", outside):
        yield Mention(doc, line_of(match.start()), match.group(0), None)


@cache
def help_text(command: tuple[str, ...]) -> str:
    if command[0].startswith("bench/"):
        result = subprocess.run(
            [sys.executable, command[0], "--help"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, f"{command[0]} --help: {result.stderr}"
        return result.stdout
    invoked = CliRunner().invoke(
        ROOTS[command[0]], [*command[1:], "--help"], env={"COLUMNS": "400"}, terminal_width=400
    )
    assert invoked.exit_code == 0, f"{' '.join(command)} --help: {invoked.output}"
    return str(invoked.output)


def _flags_in(help_output: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", help_output))


@cache
def spotpool_flags() -> frozenset[str]:
    """Every flag of every spotpool command and group (for a flag named in prose)."""
    found: set[str] = set()
    for path in _tree("spotpool"):
        found.update(_flags_in(help_text(path)))
    return frozenset(found)


ALL = [mention for doc in DOCS for mention in mentions(doc)]


def test_the_docs_name_flags_of_the_main_commands() -> None:
    """The scan finds what it should (a parser that found nothing would pass vacuously)."""
    commands = {m.command for m in ALL if m.command}
    assert ("spotpool", "operator", "run") in commands
    assert ("spotpool", "deploy", "render") in commands or ("spotpool_deploy", "render") in commands
    assert ("spotpool", "toolchain", "install") in commands
    assert len(ALL) > 50


@pytest.mark.parametrize("doc", [str(doc.relative_to(ROOT)) for doc in DOCS])
def test_every_flag_in_a_command_line_is_in_that_commands_help(doc: str) -> None:
    wrong = [
        str(m)
        for m in ALL
        if m.doc == doc and m.command and m.flag not in _flags_in(help_text(m.command))
    ]
    assert not wrong, "flags missing from their command's --help:\n" + "\n".join(wrong)


@pytest.mark.parametrize("doc", [str(doc.relative_to(ROOT)) for doc in DOCS])
def test_every_flag_named_in_prose_is_a_spotpool_flag(doc: str) -> None:
    wrong = [
        str(m)
        for m in ALL
        if m.doc == doc
        and m.command is None
        and m.flag not in spotpool_flags()
        and m.flag not in OTHER_TOOLS
    ]
    assert not wrong, "flags no spotpool command has:\n" + "\n".join(wrong)


def test_other_tools_flags_are_not_spotpool_flags() -> None:
    """OTHER_TOOLS lists only flags no spotpool command has: the prose check trusts them."""
    assert not sorted(set(OTHER_TOOLS) & spotpool_flags())


def test_a_misspelt_flag_is_found() -> None:
    line = "spotpool operator run --full-refresh-every 10 --refresh-every 5 | tee log"
    found = list(_command_line(line, "x.md", 1))
    assert [(m.command, m.flag) for m in found] == [
        (("spotpool", "operator", "run"), "--full-refresh-every"),
        (("spotpool", "operator", "run"), "--refresh-every"),
    ]
    flags = _flags_in(help_text(("spotpool", "operator", "run")))
    assert "--full-refresh-every" in flags
    assert "--refresh-every" not in flags
