"""What this process knows of each stack between operations, and the in-process lock that lets
one operation at a time run on a stack.

The memory spares an operation the Pulumi CLI runs it would need to learn it again (each costs
0.2-0.4 s): the selected stack, whether it was repaired since this process started, the config
and tags last set, the slots' URNs and the surges' instances. An operation that fails forgets
the stack; so does a shard move (`forget_stack`)."""

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spotpool.engine.basics.stack_view import StackView, WorkspaceStack
from spotpool.engine.runs.stack_workspace import own_work_dir, select_stack
from spotpool.engine.state import checkpoint_guard
from spotpool.engine.state.lean_stack import LeanStack
from spotpool.engine.state.stack_state import ids_by_surge, urns_by_slot

_stack_locks: dict[str, threading.Lock] = {}
_stack_locks_guard = threading.Lock()


def stack_lock(name: str) -> threading.Lock:
    """The lock every operation on stack `name` in this process holds."""
    with _stack_locks_guard:
        return _stack_locks.setdefault(name, threading.Lock())


@dataclass
class KnownStack:
    """What this process knows of one stack: the selected stack, whether it was repaired since
    this process started, the config and tags last set, the slots' URNs."""

    stack: LeanStack
    repaired: bool = False
    config: dict[str, str] | None = None
    tagged: bool = False
    urns: dict[int, str] = field(default_factory=dict)
    surges: dict[int, str] = field(default_factory=dict)  # slot -> its surge instance's id


_known_stacks: dict[tuple[str, str, str], KnownStack] = {}


def forget_stack(name: str) -> None:
    """Another process writes the stack from now on (its shard moved): drop what this one
    remembers of it, so its next operation selects and repairs it afresh."""
    for key in [key for key in list(_known_stacks) if key[0] == name]:
        _known_stacks.pop(key, None)
    checkpoint_guard.forget(name)


def _key(pool: StackView) -> tuple[str, str, str]:
    return (pool.name, pool.settings.backend_url, str(own_work_dir(pool)))


def known_stack(pool: WorkspaceStack, reselect: bool = False) -> KnownStack:
    """This process's memory of the stack, selecting it (one CLI run) the first time.
    The environment (credentials may rotate) is refreshed on every call."""
    key = _key(pool)
    known = _known_stacks.get(key)
    if known is None or reselect:
        known = _known_stacks[key] = KnownStack(stack=select_stack(pool))
    known.stack.workspace.env_vars = pool.run_env()
    return known


def known_already(pool: StackView) -> KnownStack | None:
    """What this process knows of the stack, without selecting it when it knows nothing."""
    return _known_stacks.get(_key(pool))


def forget_known(pool: StackView) -> None:
    _known_stacks.pop(_key(pool), None)


def remember_urns(pool: WorkspaceStack, state: Mapping[str, Any]) -> None:
    """Remember the slots' URNs and the surges' instances `state` records."""
    known = known_stack(pool)
    known.urns = urns_by_slot(state)
    known.surges = ids_by_surge(state)
