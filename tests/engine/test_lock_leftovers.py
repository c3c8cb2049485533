"""What a CLI killed while taking the stack's lock leaves behind, on a file backend, for real
(pulumi CLI, tencentcloud plugin, emulator).

fileblob writes the lock as `<id>.json.<hex nanos>.tmp` next to it and renames it into place; a
CLI killed in between (a replica that lost its shard under load and killed its runs, then took
the shard again) leaves the temporary file. Pulumi counts it as a lock for good ("the stack is
currently locked by 1 lock(s)"): a pool deleted after it stayed `StackLocked` for ever (a
fresh-clone e2e run, test_delete_mid_storm)."""

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.engine.conftest import EngineWorld

pytestmark = pytest.mark.integration


def _lock_dir(world: EngineWorld, stack: str) -> Path:
    root = Path(world.settings.backend_url.removeprefix("file://"))
    return root / ".pulumi" / "locks" / "organization" / "spotpool" / stack


def _half_written_lock(directory: Path, pid: int) -> Path:
    """A lock write cut between fileblob's sidecar and its rename, as a killed CLI leaves it:
    the whole content in the temporary file, its metadata beside the final name."""
    directory.mkdir(parents=True, exist_ok=True)
    lock_id = "0b7e1c52-5d0e-4c59-9a55-3d3f1d7b9a10"
    content = {
        "pid": pid,
        "username": "root",
        "hostname": os.uname().nodename,
        "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
    }
    temporary = directory / f"{lock_id}.json.{time.time_ns():x}.tmp"
    temporary.write_text(json.dumps(content))
    (directory / f"{lock_id}.json.attrs").write_text('{"user.content_type":"application/json"}')
    return temporary


def test_a_lock_left_half_written_by_a_killed_cli_does_not_block_the_stack(
    world: EngineWorld,
) -> None:
    stack = world.pool()
    stack.up(world.config(stack, 1))
    assert len(world.cloud_instances(stack)) == 1
    # Its writer is a live process of this host (as a pid reused since): still never a lock.
    leftover = _half_written_lock(_lock_dir(world, stack.name), os.getpid())

    result = stack.destroy()

    assert any("half-written lock" in note for note in result.recovered), result.recovered
    assert not leftover.exists()
    assert world.cloud_instances(stack) == {}
    assert not list(_lock_dir(world, stack.name).glob("*.json"))
    assert not list(_lock_dir(world, stack.name).glob("*.tmp"))


def test_a_whole_lock_of_a_live_owner_is_still_kept(world: EngineWorld) -> None:
    """The leftover rule removes temporary files only: a lock in place whose owner lives is
    reported as before, not broken."""
    from spotpool.engine.basics.errors import StackLockedError

    stack = world.pool()
    stack.up(world.config(stack, 1))
    leftover = _half_written_lock(_lock_dir(world, stack.name), os.getpid())
    whole = leftover.with_name(leftover.name.split(".json.")[0] + ".json")
    leftover.rename(whole)
    parent = os.getppid()  # alive, and not this process: its lock is a live run's
    whole.write_text(json.dumps({**json.loads(whole.read_text()), "pid": parent}))

    with pytest.raises(StackLockedError):
        stack.destroy()
    assert whole.exists()
    assert len(world.cloud_instances(stack)) == 1
