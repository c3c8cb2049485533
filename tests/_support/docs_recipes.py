"""The local recipes of the README and docs/, read from the Markdown itself and run in one shell.

A page marks a fenced block to run with an HTML comment on the line before its fence (GitHub
shows nothing of it), and a block of what the recipe prints the same way:

    <!-- docs-test: run -->          a block of commands, run in order, page by page
    <!-- docs-test: teardown -->     run after every page's recipes (the README's clean-up)
    <!-- docs-test: output -->       `$ command` lines, each followed by lines it prints
    <!-- docs-test: output in-order -->   the same, the lines in that order

Every command runs in one bash process (`source`d, so its exports, `cd` and background jobs
carry over to the next, as in a person's terminal) and must exit 0, or the code a trailing
comment names (`# exits 2: changes`). An output block's lines must each be among the lines its
command printed, after both sides lose what differs from run to run (instance ids, times, ages,
addresses, a slot number); `…` stands for anything (a line of it alone: lines left out).
"""

import contextlib
import os
import queue
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The pages whose local recipes run, in the order a reader takes them: the README's world first
# (its teardown runs last).
PAGES = [
    "README.md",
    "docs/inspecting-stacks.md",
    "docs/credentials.md",
    "docs/placement.md",
    "docs/troubleshooting.md",
]
MARK = re.compile(r"^<!--\s*docs-test:\s*(run|teardown|output(?: in-order)?)\s*-->\s*$")
FENCE = re.compile(r"^(```+|~~~+)")
HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")
EXITS = re.compile(r"#.*\bexits? (\d+)\b")
COMMENT = re.compile(r"(^|\s)#(\s.*)?$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the fence's first line, 1-based
    kind: str  # run | teardown | output | output in-order
    text: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: Path, root: Path) -> list[Block]:
    """The marked blocks of a Markdown page, in page order."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        mark = MARK.match(lines[index].strip())
        if mark is None:
            index += 1
            continue
        start = index + 1
        while start < len(lines) and not lines[start].strip():
            start += 1
        fence = FENCE.match(lines[start].strip()) if start < len(lines) else None
        if fence is None:
            raise ValueError(f"{page}:{index + 1}: a docs-test mark with no fenced block after it")
        end = start + 1
        while end < len(lines) and not lines[end].strip().startswith(fence.group(1)):
            end += 1
        body = "\n".join(lines[start + 1 : end])
        found.append(Block(str(page.relative_to(root)), start + 1, mark.group(1), body))
        index = end + 1
    return found


def commands(text: str) -> list[str]:
    """A block's commands: `\\`-continued lines joined, a here-document kept whole, comment
    lines and blank lines left out."""
    found: list[str] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line.strip() or line.strip().startswith("#"):
            continue
        command = line
        while command.rstrip().endswith("\\") and index < len(lines):
            command = command.rstrip()[:-1].rstrip() + " " + lines[index].strip()
            index += 1
        heredoc = HEREDOC.search(command)
        if heredoc is not None:
            while index < len(lines):
                command += "\n" + lines[index]
                index += 1
                if lines[index - 1].strip() == heredoc.group(1):
                    break
        found.append(command)
    return found


def expected_exit(command: str) -> int:
    first = command.splitlines()[0]
    said = EXITS.search(first)
    return int(said.group(1)) if said else 0


def bare(command: str) -> str:
    """A command as compared with an output block's `$` line: no comment, spaces collapsed."""
    first, *rest = command.splitlines()
    return " ".join(" ".join([COMMENT.sub("", first), *rest]).split())


# What differs from one run to the next, on both sides of a comparison.
_VOLATILE = [
    (re.compile(r"\bins-[0-9a-z]{8}\b"), "ins-ID"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)"), "TIME"),
    (re.compile(r"\b\d+(\.\d+)?(ms|s|m|h|d)(\d+(s|m|h))?\b"), "AGE"),
    (re.compile(r"\b\d+(\.\d+)? s\b"), "N s"),
    (re.compile(r"\b\d{1,3}(\.\d{1,3}){3}\b"), "IP"),
    (re.compile(r"\bslot \d+\b"), "slot N"),
    (re.compile(r"\b(\d+|a|an) (second|minute|hour|day)s? ago\b"), "WHEN ago"),
    (re.compile(r"127\.0\.0\.1:\d+|localhost:\d+"), "LOOPBACK"),
]


def normal(line: str) -> str:
    for pattern, said in _VOLATILE:
        line = pattern.sub(said, line)
    return " ".join(line.split())


def expectations(block: Block) -> list[tuple[str, list[str]]]:
    """(command, the lines it prints) of each `$` line of an output block."""
    found: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            found.append((bare(line[2:]), []))
        elif found:
            found[-1][1].append(line)
        elif line.strip():
            raise ValueError(f"{block.where}: an output block starts with a `$ command` line")
    return found


def missing(expected: list[str], printed: str, in_order: bool = False) -> list[str]:
    """The expected lines none of the printed lines matches (`in_order`: none after the line
    the one before it matched)."""
    lines = [normal(line) for line in printed.splitlines()]
    absent = []
    after = 0
    for line in expected:
        if not line.strip() or line.strip() == "…":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in normal(line).split("…")))
        found = [i for i, candidate in enumerate(lines) if pattern.fullmatch(candidate)]
        if in_order:
            found = [i for i in found if i >= after]
        if not found:
            absent.append(line)
        else:
            after = found[0] + 1
    return absent


@dataclass
class Ran:
    command: str
    code: int
    output: str
    seconds: float


@dataclass
class Shell:
    """One bash process, as a person's terminal: every command `source`d from a file, its
    output (stdout and stderr) read up to a marker line."""

    cwd: Path
    env: Mapping[str, str]
    scratch: Path
    log: list[Ran] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=self.cwd,
            env=dict(self.env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._send("exec 2>&1")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _send(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()

    def run(self, command: str, timeout: float = 300.0) -> Ran:
        marker = f"__docs_test_{uuid.uuid4().hex}__"
        script = self.scratch / f"{len(self.log):03d}.sh"
        script.write_text(command + "\n")
        started = time.monotonic()
        self._send(f"source {script} < /dev/null; printf '\\n{marker} %s\\n' \"$?\"")
        output: list[str] = []
        code = -1
        deadline = started + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                output.append(f"(no end after {timeout:.0f} s)")
                break
            if line is None:
                output.append("(the shell ended)")
                break
            if line.startswith(marker):
                code = int(line.split()[1])
                break
            output.append(line.rstrip("\n"))
        if output and not output[-1]:
            output.pop()  # the marker's own leading newline
        ran = Ran(command, code, "\n".join(output), round(time.monotonic() - started, 1))
        self.log.append(ran)
        return ran

    def last(self, command: str) -> Ran | None:
        for ran in reversed(self.log):
            if bare(ran.command) == command:
                return ran
        return None

    def close(self) -> None:
        """End the shell and whatever it left running (its own session only)."""
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, 15)
        self.process.wait(timeout=10)


def transcript(log: list[Ran]) -> Iterator[str]:
    for ran in log:
        yield f"$ {ran.command}   [exit {ran.code}, {ran.seconds} s]"
        yield from ran.output.splitlines()[-40:]
