"""The slots a killed run was creating, kept in the backend until an `up` has swept them.

A run killed mid-create (its shard lost, its timeout) leaves a pending create in the stack's
state: the proof that a young instance of that slot not in the state is a dead run's, adopted
or terminated at once instead of waiting out the orphan grace (orphans.py). The next operation
must clear pending creates before Pulumi runs again, which erased that proof: if the operation
that cleared them was not an `up` (a refresh says "adopted by the next up") or was itself
killed (the shard moved on again), the next `up` saw a young orphan with no proof and left it
running beside the slot's new instance. So the proof is written down first, as one small
object beside the checkpoint (`<stack>.spotpool-dead-run`), read by every operation's repair,
and removed once an `up` has swept with it.
"""

import json

from spotpool.api.stackconfig import PROJECT
from spotpool.engine.basics.stack_view import StackView
from spotpool.engine.state.backend_files import ROOT, BackendFiles, open_backend

SUFFIX = ".spotpool-dead-run"


def _key(stack: str) -> str:
    return f"{ROOT}/stacks/{PROJECT}/{stack}{SUFFIX}"


def _files(pool: StackView) -> BackendFiles | None:
    return open_backend(pool.settings.backend_url)


def recorded(pool: StackView) -> frozenset[int]:
    """The slots dead runs of this stack were creating, as recorded (none if unreadable)."""
    files = _files(pool)
    if files is None:
        return frozenset()
    try:
        slots = json.loads(files.read(_key(pool.name))).get("slots") or []
    except Exception:  # missing (the usual case), half-written or not ours: no proof
        return frozenset()
    return frozenset(s for s in slots if isinstance(s, int) and s >= 0)


def record(pool: StackView, slots: frozenset[int]) -> None:
    """Keep `slots` (with any already recorded) before their pending creates are cleared."""
    files = _files(pool)
    if files is None or not slots:
        return
    files.write(_key(pool.name), json.dumps({"slots": sorted(slots | recorded(pool))}).encode())


def settle(pool: StackView) -> None:
    """An `up` swept with the proof: its slots' instances are adopted or gone."""
    files = _files(pool)
    if files is not None:
        files.delete(_key(pool.name))
