"""Stop Pulumi runs for real: the CLI and every process under it.

The Automation API starts the `pulumi` CLI as a child of this process; the CLI starts the
provider plugins, each in a process group of its own, so killing the CLI's group leaves them
running. The whole tree is collected first and then killed, leaves included. And none
starts without passing its thread's fence (`fenced`): a writer that lost its Lease launches
no further CLI, and a CLI already running sends nothing more through the replica once the
fence fails (its cloud calls and backend writes are admitted per run: run_fence.py).
"""

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from pulumi import automation as auto
from pulumi.automation.errors import create_command_error
from semver import VersionInfo

from spotpool.engine.fencing import run_fence
from spotpool.engine.fencing.child_env import child_environment
from spotpool.toolchain.manifest import PULUMI_VERSION

# The niceness of the thread that launches a CLI, and so of the CLI and its plugins: a replica
# at its CPU limit in a storm runs its Lease renewals, its event loop and its API calls first,
# the Pulumi runs with what is left (on an idle machine nothing changes). Raising one's own
# niceness needs no privilege; the engine's threads stay at it.
RUN_NICENESS = 10


def lower_run_priority() -> None:
    """This thread (and every process it starts from now) at RUN_NICENESS, at least."""
    thread = threading.get_native_id()
    try:
        if os.getpriority(os.PRIO_PROCESS, thread) < RUN_NICENESS:
            os.setpriority(os.PRIO_PROCESS, thread, RUN_NICENESS)
    except OSError:  # not Linux, or a sandbox that refuses: runs keep the default priority
        pass


def pulumi_runs(stack: str | None = None) -> list[psutil.Process]:
    """The `pulumi` CLI processes this process started (for `stack`, or all)."""
    runs = []
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if os.path.basename(child.exe()) != "pulumi":
                continue
            if stack is not None and stack not in child.cmdline():
                continue
        except psutil.Error:
            continue
        runs.append(child)
    return runs


def kill_runs(stack: str | None = None, grace: float = 0.0) -> list[int]:
    """SIGKILL the CLI runs (of `stack`, or all) and their whole trees; their pids."""
    killed: list[int] = []
    for run in pulumi_runs(stack):
        try:
            tree = [run, *run.children(recursive=True)]
        except psutil.Error:
            tree = [run]
        for process in tree:
            try:
                process.send_signal(signal.SIGKILL)
                killed.append(process.pid)
            except psutil.Error:
                pass
    if grace:
        time.sleep(grace)
    return killed


# --- fencing: a check before every CLI launch ------------------------------------------------

_fence = threading.local()


@contextmanager
def fenced(check: Callable[[], None]) -> Iterator[None]:
    """While in this block, every Pulumi CLI this thread launches is launched only after
    `check` passes (it raises to refuse: the writer lost its right to write the stack)."""
    previous = getattr(_fence, "check", None)
    _fence.check = check
    try:
        yield
    finally:
        _fence.check = previous


def check_fence() -> None:
    """Raise unless this thread may launch a CLI now (no fence: run by hand, always)."""
    check = getattr(_fence, "check", None)
    if check is not None:
        check()


def current_fence() -> Callable[[], None]:
    """This thread's fence as a callable another thread can check (a no-op when unfenced):
    for work an operation hands to threads of its own (the fast path's launches)."""
    check = getattr(_fence, "check", None)
    return check if check is not None else _unfenced


def _unfenced() -> None:
    return None


class FencedCommand(auto.PulumiCommand):
    """The Pulumi CLI runner of every stack: each launch passes the thread's fence first, so
    no run starts once the writer lost its Lease — not even the next CLI of an operation
    already under way (the `up` after an orphan sweep, a refresh after a repair).

    It is the pinned CLI (`make toolchain` checks the version it reports), so it is not asked
    again: the Automation API's `pulumi version` costs 0.1-0.2 CPU-s a process and writes a
    debug log into the user's Pulumi home."""

    def __init__(self, root: str) -> None:  # no super().__init__: that runs `pulumi version`
        self.command = os.path.join(root, "bin", "pulumi")
        self.version = VersionInfo.parse(PULUMI_VERSION)

    def run(
        self,
        args: list[str],
        cwd: str,
        additional_env: Mapping[str, str],
        on_output: Callable[[str], Any] | None = None,
        on_error: Callable[[str], Any] | None = None,
    ) -> auto.CommandResult:
        check_fence()
        lower_run_priority()
        check = getattr(_fence, "check", None)
        with run_fence.admitted(additional_env, cwd, check) as env:
            return self._run(args, cwd, env, on_output, on_error)

    def _run(
        self,
        args: list[str],
        cwd: str,
        run_env: Mapping[str, str],
        on_output: Callable[[str], Any] | None,
        on_error: Callable[[str], Any] | None,
        stdin: str | None = None,
    ) -> auto.CommandResult:
        """The Automation API's `run`, with the environment the run needs (child_env.py)
        instead of all of this process's, and an optional stdin (a secret's value: never an
        argument, where /proc/<pid>/cmdline shows it)."""
        if "--non-interactive" not in args:
            args = ["--non-interactive", *args]
        backend = run_env.get("PULUMI_BACKEND_URL") or run_fence.project_backend(Path(cwd))
        env = child_environment(run_env, backend, args, cwd)
        env["PULUMI_AUTOMATION_API"] = "true"
        env["PATH"] = os.pathsep.join([os.path.dirname(self.command), env.get("PATH", "")])
        chunks: dict[str, list[str]] = {"out": [], "err": []}

        def consume(stream: Any, callback: Callable[[str], Any] | None, name: str) -> None:
            for line in iter(stream.readline, ""):
                stripped = line.rstrip()
                if callback:
                    callback(stripped)
                chunks[name].append(stripped)
            stream.close()

        with subprocess.Popen(
            [self.command, *args],
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            encoding="utf-8",
        ) as process:
            readers = [
                threading.Thread(target=consume, args=(process.stdout, on_output, "out")),
                threading.Thread(target=consume, args=(process.stderr, on_error, "err")),
            ]
            for reader in readers:
                reader.start()
            if stdin is not None and process.stdin is not None:
                process.stdin.write(stdin)
                process.stdin.close()
            for reader in readers:
                reader.join()
            code = process.wait()
        result = auto.CommandResult(
            stdout="\n".join(chunks["out"]), stderr="\n".join(chunks["err"]), code=code
        )
        if code != 0:
            raise create_command_error(result)
        return result

    def run_with_input(
        self, args: list[str], cwd: str, additional_env: Mapping[str, str], stdin: str
    ) -> auto.CommandResult:
        """`run`, the CLI reading `stdin` (`pulumi config set --secret KEY` reads the value
        from it when not interactive)."""
        check_fence()
        check = getattr(_fence, "check", None)
        with run_fence.admitted(additional_env, cwd, check) as env:
            return self._run(args, cwd, env, None, None, stdin)
