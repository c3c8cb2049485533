"""The docs run: every local recipe of the README and docs/ that a page marks
(`<!-- docs-test: run -->`) is read from the Markdown and run, as written, in one shell against
one local world, and what the page says it prints (`<!-- docs-test: output -->`) must be among
what it printed. A page that drifts from the code fails here.

The world is the README's own ("Try the API by hand": `spotpool cluster up`, `spotpool emulator
serve`, `spotpool operator run`); every other page's recipes run on it, then the README's
teardown, after which nothing of it may be left: no process, no work dir, no state. Two things
differ from a person's terminal, and only these: `/tmp/try` is a directory of the test's own
and port 9000 a free one (several runs share a machine), and `XDG_STATE_HOME` points into the
test's directory, so that "nothing left behind" is checked where `~/.local/state` would be.
"""

import os
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._support.docs_recipes import (
    PAGES,
    ROOT,
    Shell,
    blocks,
    commands,
    expectations,
    expected_exit,
    missing,
    transcript,
)
from tests.conftest import require_tool
from tests.e2e._support.proc_scan import processes_mentioning

pytestmark = pytest.mark.e2e  # a world of its own: a cluster, an operator (one, so not heavy)

# The caller's settings a fresh shell would not have.
DROPPED = re.compile(r"^(KUBECONFIG|PULUMI_.*|SPOTPOOL_.*|TENCENTCLOUD_.*|TKE_.*|VIRTUAL_ENV)$")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[tuple[Shell, Path]]:
    for tool in ("etcd", "kube-apiserver", "kubectl", "pulumi", "pulumi-resource-tencentcloud"):
        require_tool(tool)
    env = {k: v for k, v in os.environ.items() if not DROPPED.match(k)}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    venv_bin = str(ROOT / ".venv" / "bin")
    env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if p != venv_bin)
    terminal = Shell(cwd=ROOT, env=env, scratch=tmp_path / "commands")
    try:
        yield terminal, tmp_path
    finally:
        terminal.close()
        world = tmp_path / "try"
        if (world / "cluster.json").exists():  # a failed run's cluster, stopped all the same
            spotpool = ROOT / ".venv" / "bin" / "spotpool"
            subprocess.run([str(spotpool), "cluster", "down", "--dir", str(world)], check=False)


def test_the_local_recipes_run_as_written_and_print_what_the_pages_show(
    shell: tuple[Shell, Path],
) -> None:
    terminal, tmp_path = shell
    port = str(_free_port())
    world = str(tmp_path / "try")

    def as_here(command: str) -> str:
        return re.sub(r"\b9000\b", port, command.replace("/tmp/try", world))

    plan = [block for page in PAGES for block in blocks(ROOT / page, ROOT)]
    ordered = [b for b in plan if b.kind != "teardown"] + [b for b in plan if b.kind == "teardown"]
    problems = [f"{page}: no local recipe marked to run" for page in PAGES if not any(
        block.page == page and block.kind == "run" for block in plan
    )]  # fmt: skip
    for block in ordered:
        if block.kind.startswith("output"):
            for command, lines in expectations(block):
                ran = terminal.last(as_here(command))
                if ran is None:
                    problems.append(
                        f"{block.where}: `{command}` is not run by any recipe before it"
                    )
                    continue
                absent = missing(
                    [as_here(line) for line in lines], ran.output, block.kind.endswith("in-order")
                )
                if absent:
                    problems.append(
                        f"{block.where}: `{command}` did not print:\n  "
                        + "\n  ".join(absent)
                        + "\nit printed:\n  "
                        + "\n  ".join(ran.output.splitlines()[-30:])
                    )
            continue
        for command in commands(block.text):
            ran = terminal.run(as_here(command))
            wanted = expected_exit(command)
            if ran.code != wanted:
                problems.append(
                    f"{block.where}: `{command.splitlines()[0]}` exited {ran.code} "
                    f"(not {wanted}) after {ran.seconds} s:\n  "
                    + "\n  ".join(ran.output.splitlines()[-20:])
                )
    seconds = sum(ran.seconds for ran in terminal.log)
    print(f"docs recipes: {len(terminal.log)} commands in {seconds:.0f} s")
    print("\n".join(transcript(terminal.log)))

    # The README's teardown left nothing behind: no process, no directory, no work dir.
    terminal.close()
    problems += [f"still running after the teardown: {p}" for p in processes_mentioning(world)]
    if Path(world).exists():
        problems.append(f"the teardown left {world} behind: {sorted(os.listdir(world))}")
    state = tmp_path / "state" / "spotpool"
    left = sorted(str(p.relative_to(state)) for p in state.rglob("*")) if state.exists() else []
    if left:
        problems.append(f"the teardown left ~/.local/state/spotpool behind: {left[:10]}")
    assert not problems, "\n\n".join(problems)
