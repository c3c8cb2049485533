"""The undo of a late checkpoint save (engine/state/checkpoint_guard.py), on a file backend's files:
only after this writer broke a possibly live lock, only over what its own operation left, and
never once the shard moved on."""

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spotpool.engine.state import checkpoint_guard

pytestmark = pytest.mark.unit

STACK = "team-a.gpu"


@pytest.fixture
def pool(tmp_path: Path) -> Any:
    checkpoint_guard.forget(STACK)
    settings = SimpleNamespace(backend_url=f"file://{tmp_path}")
    yield SimpleNamespace(name=STACK, settings=settings)
    checkpoint_guard.forget(STACK)


def _checkpoint(pool: Any) -> Path:
    return Path(pool.settings.backend_url.removeprefix("file://")) / (
        f".pulumi/stacks/spotpool/{STACK}.json.gz"
    )


def _save(pool: Any, data: bytes) -> None:
    path = _checkpoint(pool)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_a_late_save_over_an_exposed_stack_is_undone_and_kept_beside(pool: Any) -> None:
    _save(pool, b"before the takeover")
    checkpoint_guard.exposed(pool)  # the takeover broke the frozen run's lock
    _save(pool, b"the new holder's")
    checkpoint_guard.remember(pool)
    _save(pool, b"the thawed run's")

    notes = checkpoint_guard.undo_late_save(pool)

    assert notes and "late checkpoint save" in notes[0]
    assert _checkpoint(pool).read_bytes() == b"the new holder's"
    kept = list(_checkpoint(pool).parent.glob(f"{STACK}.json.gz.late-*"))
    assert [k.read_bytes() for k in kept] == [b"the thawed run's"]
    assert checkpoint_guard.undo_late_save(pool) == []  # once


def test_nothing_is_undone_without_a_broken_live_lock(pool: Any) -> None:
    _save(pool, b"ours")
    checkpoint_guard.remember(pool)
    _save(pool, b"a person's run, the pool paused")
    assert checkpoint_guard.undo_late_save(pool) == []
    assert _checkpoint(pool).read_bytes() == b"a person's run, the pool paused"


def test_a_shard_that_moved_on_forgets_what_it_left(pool: Any) -> None:
    checkpoint_guard.exposed(pool)
    _save(pool, b"ours")
    checkpoint_guard.remember(pool)
    checkpoint_guard.forget(STACK)  # the shard moved: the next holder writes now
    _save(pool, b"the next holder's")
    assert checkpoint_guard.undo_late_save(pool) == []
    assert _checkpoint(pool).read_bytes() == b"the next holder's"
