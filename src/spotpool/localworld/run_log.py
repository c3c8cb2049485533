"""The engine runs an operator's log records (`<call> of <stack> begins|ends`, logger
spotpool_operator.runs at INFO, by shard-fenced calls only: with --shards), and the runs of
several replicas that overlapped on one stack — which must never happen.

A process SIGKILLed in the middle of a run logs no end: a `=== killed at <epoch s> ===` line
(written by whoever killed it) ends its open runs then; a new `=== operator start` without one
ends them at its last timestamped line."""

import re
from datetime import datetime
from pathlib import Path

# Unanchored: a line another thread printed in pieces (a traceback of a killed run) may
# stand before a log line in the same file.
RUN_LINE = re.compile(
    r"\[(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\].*\] (?P<what>\w+) of (?P<stack>\S+) "
    r"(?P<edge>begins|ends)$"
)
STAMP = re.compile(r"^\[(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")
KILLED = re.compile(r"^=== killed at (?P<at>\d+(?:\.\d+)?) ===$")
START = "=== operator start"

Span = tuple[float, float, str]


def _at(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def kill_marker(at: float) -> str:
    """The line to append to a log when its operator was SIGKILLed at `at` (time.time())."""
    return f"=== killed at {at:.3f} ===\n"


def runs(log: Path, open_until: float) -> dict[str, list[Span]]:
    """stack -> the intervals this replica ran Pulumi on it, from its log (a run still open at
    the end: until `open_until`)."""
    depth: dict[str, int] = {}
    began: dict[str, float] = {}
    spans: dict[str, list[Span]] = {}
    last = 0.0

    def close_all(at: float, why: str) -> None:
        for stack, left in depth.items():
            if left:
                spans.setdefault(stack, []).append((began[stack], at, why))
        depth.clear()

    for line in log.read_text(errors="replace").splitlines():
        if (killed := KILLED.match(line)) is not None:
            close_all(float(killed["at"]), "killed")
            continue
        if line.startswith(START):
            close_all(last, "stopped")
            continue
        if (stamp := STAMP.match(line)) is not None:
            last = _at(stamp["at"])
        found = RUN_LINE.search(line)
        if not found:
            continue
        at, stack = _at(found["at"]), found["stack"]
        if found["edge"] == "begins":
            if not depth.get(stack):
                began[stack] = at
            depth[stack] = depth.get(stack, 0) + 1
        elif depth.get(stack):
            depth[stack] -= 1
            if not depth[stack]:
                spans.setdefault(stack, []).append((began[stack], at, found["what"]))
    close_all(open_until, "unended")
    return spans


def overlaps(logs: dict[str, Path], open_until: float) -> tuple[list[str], int]:
    """Runs of two replicas (name -> log) on one stack at once, and how many runs there were."""
    by_replica = {name: runs(log, open_until) for name, log in logs.items()}
    found, count = [], 0
    for name, by_stack in by_replica.items():
        for stack, spans in by_stack.items():
            count += len(spans)
            for other, theirs in by_replica.items():
                if other <= name:
                    continue
                for start, end, what in spans:
                    for o_start, o_end, o_what in theirs.get(stack, []):
                        if start < o_end and o_start < end:
                            found.append(f"{stack}: {name} {what} and {other} {o_what}")
    return found, count
