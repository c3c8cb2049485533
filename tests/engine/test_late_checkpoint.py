"""A late checkpoint save on a `file://` backend is undone before anything acts on it, for real
(pulumi CLI, tencentcloud plugin, emulator).

Issue 33, path 3 on `file://`: a CLI frozen (SIGSTOP) mid-run whose lock the pool's next writer
broke, thawed after that writer saved its own checkpoint, renames its snapshot over it — the
CLI checks its lock only when it takes it. The new writer's instance falls out of the state;
its next `up` launched a second instance for the slot (the one it made stays, untracked)."""

import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from spotpool.api.stackconfig import PROJECT, PoolIdentity
from spotpool.engine.fencing.ownership import Writer
from spotpool.engine.stacks.stack import PoolStack
from spotpool.engine.state.backend_files import latest_deployment, open_backend
from spotpool.engine.state.stack_state import ids_by_slot
from tests.emulator.harness import wait_until
from tests.engine.conftest import REGION, EngineWorld

pytestmark = pytest.mark.integration


class TakenOver:
    """The pool's Lease as its new holder sees it: held, acquired `at`, this host an earlier
    holder (the frozen CLI's lock was taken before: it is broken)."""

    def __init__(self) -> None:
        self.at = datetime.now(UTC)

    def held(self) -> bool:
        return True

    def acquired_at(self) -> datetime:
        return self.at

    def earlier_holders(self) -> frozenset[str]:
        return frozenset({socket.gethostname()})


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def test_a_thawed_clis_late_save_is_undone_and_no_second_instance_is_made(
    world: EngineWorld,
) -> None:
    lease = TakenOver()
    # Orphans young for the whole test: only the state, not the sweep, says what is the pool's.
    settings = world.settings.model_copy(
        update={"writer": Writer(socket.gethostname(), os.getpid(), lease), "orphan_min_age": 900}
    )
    identity = PoolIdentity(namespace="team-a", name="late", uid=str(uuid.uuid4()))
    stack = PoolStack(identity, settings, world.credentials, REGION, world.progress.append)
    stack.up(world.config(stack, 1))
    files = open_backend(settings.backend_url)
    assert files is not None
    locks = Path(settings.backend_url.removeprefix("file://")) / ".pulumi" / "locks"

    # An earlier writer's run: a refresh that reads the state (one instance) and is frozen
    # mid-run, its lock taken, its cloud reads slow enough to be caught.
    slow = {"Service": "cvm", "Action": "DescribeInstances", "Rate": 0.0, "LatencyMs": 10000}
    world.emulator.admin_ok("POST", "/_emulator/faults", slow)
    err = Path(settings.work_root) / "late-run.err"
    late = subprocess.Popen(
        [str(settings.tools_dir / "pulumi"), "refresh", "--yes", "--skip-preview",
         "--stack", stack.name],
        cwd=settings.work_root / stack.name, env={**os.environ, **stack.run_env()},
        stdout=subprocess.DEVNULL, stderr=err.open("w"), start_new_session=True,
    )  # fmt: skip
    frozen: list[psutil.Process] = []
    try:
        wait_until(lambda: list(locks.rglob("*.json")), "the earlier run's lock", timeout=60)
        time.sleep(0.5)  # its refresh under way, waiting on the cloud
        try:
            frozen = _tree(late.pid)
        except psutil.NoSuchProcess:
            frozen = []
        assert frozen and late.poll() is None, f"the run ended first: {err.read_text()[-500:]}"
        for process in frozen:
            process.send_signal(signal.SIGSTOP)
        world.emulator.admin_ok("DELETE", "/_emulator/faults")

        # The new writer takes the pool over: breaks the frozen run's lock, adds an instance.
        lease.at = datetime.now(UTC)
        grown = stack.up(world.config(stack, 2))
        assert any("removed the lock" in note for note in grown.recovered), grown.recovered
        mine = ids_by_slot(latest_deployment(files, PROJECT, stack.name) or {})
        assert len(mine) == 2

        for process in frozen:  # the thaw: the frozen run ends and saves its snapshot
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGCONT)
        late.wait(timeout=120)
        overwritten = ids_by_slot(latest_deployment(files, PROJECT, stack.name) or {})
        assert set(overwritten) == {0}, "the late save did not land: nothing to undo"

        again = stack.up(world.config(stack, 2))
    finally:
        for process in frozen:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(late.pid, signal.SIGKILL)
        late.wait(timeout=30)
        world.emulator.admin_ok("DELETE", "/_emulator/faults")

    assert again.changes.create == 0, (again.changes, again.recovered)  # no second instance
    assert sorted(world.cloud_instances(stack)) == sorted(mine.values())
    assert ids_by_slot(latest_deployment(files, PROJECT, stack.name) or {}) == mine
    assert any("late checkpoint save" in note for note in again.recovered), again.recovered
    kept = list((locks.parent / "stacks" / PROJECT).glob(f"{stack.name}.json*.late-*"))
    assert kept, "the late snapshot is kept beside the checkpoint"
