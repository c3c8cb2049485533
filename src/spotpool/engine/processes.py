"""Stop Pulumi runs for real: the CLI and every process under it.

The Automation API starts the `pulumi` CLI as a child of this process; the CLI starts the
provider plugins, each in a process group of its own, so killing the CLI's group leaves them
running. The whole tree is collected first and then killed, leaves included.
"""

import os
import signal
import time

import psutil


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
