"""The frame every operation on a pool's stack runs in: the stack's in-process lock, a repair
of what a killed run left behind (recovery.py), a watchdog that kills a run past the operation
timeout, and the translation of a failed run into an EngineError."""

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pulumi import automation as auto

from spotpool.engine.basics.errors import EngineError, OperationTimeout
from spotpool.engine.basics.events import EventPrinter
from spotpool.engine.basics.results import OperationKind, OperationResult, changes_from_summary
from spotpool.engine.basics.stack_view import OperatedStack
from spotpool.engine.fencing.processes import kill_runs
from spotpool.engine.leftovers import dead_runs, recovery
from spotpool.engine.runs.known_stacks import (
    forget_known,
    known_already,
    known_stack,
    remember_urns,
    stack_lock,
)
from spotpool.engine.state import checkpoint_guard
from spotpool.engine.state.stack_state import instances_of, state_of


@contextmanager
def operation(
    pool: OperatedStack, kind: OperationKind, light: bool = False
) -> Iterator[tuple[auto.Stack, OperationResult, Mapping[str, Any]]]:
    """Lock, select, repair; yields the stack, its result and its state (one read).

    `light`: skip reading the state and the repair when this process already repaired the
    stack and its own runs since then all ended cleanly (the state is then empty of
    anything a killed run leaves); the state yielded is empty.
    """
    started = time.monotonic()
    with stack_lock(pool.name):
        guard = pool.settings.guard  # another live cluster's stack, or a rival: no run at all
        taken = guard.check(pool) if guard is not None else None
        late = checkpoint_guard.undo_late_save(pool)  # before anything reads the state
        cached = known_already(pool)
        light = light and cached is not None and cached.repaired and not late
        # A kill can leave a half-written metadata file that makes the stack unselectable:
        # mend it before selecting (a cheap look at a file backend's files).
        mended = [] if light else recovery.mend_backend_files(pool)
        known = known_stack(pool, reselect=bool(mended))
        known.stack.forget_export()  # the state may have moved since this process looked
        result = OperationResult(kind=kind, stack=pool.name, seconds=0.0, recovered=late)
        if taken:
            result.recovered.append(taken)
        timeout = pool.settings.operation_timeout
        fired = threading.Event()

        def kill() -> None:
            fired.set()
            kill_runs(pool.name)

        watchdog = threading.Timer(timeout, kill)
        watchdog.daemon = True
        watchdog.start()
        try:
            if light or known.stack.created:  # a stack created just now is empty
                state: Mapping[str, Any] = {}
                known.repaired = True
            else:
                state = state_of(known.stack)
                pool.dead_run_slots = recovery.pending_slots(state) | dead_runs.recorded(pool)
                result.recovered += mended + recovery.repair(pool, known.stack, state)
                if result.recovered:  # the repair changed the state
                    state = state_of(known.stack)
                remember_urns(pool, state)
                known.repaired = True
            yield known.stack, result, state
        except auto.CommandError as err:
            forget_known(pool)  # a failed run may have left a lock, pending ops, no stack
            if fired.is_set():
                raise OperationTimeout(
                    f"{kind} of stack {pool.name} ran over {timeout:.0f} s and was killed "
                    "with its plugins; the next operation recovers its lock"
                ) from None
            raise EngineError(
                f"{kind} of stack {pool.name} failed: {command_reason(err)}"
            ) from None
        except BaseException:
            forget_known(pool)
            raise
        finally:
            watchdog.cancel()
            checkpoint_guard.remember(pool)  # its CLI runs are over: the checkpoint is ours
        result.recovered += recovery.prune_history(pool)
        result.seconds = round(time.monotonic() - started, 2)


def progress_printer(pool: OperatedStack) -> EventPrinter | None:
    """What turns a run's engine events into the pool's progress lines, if anyone listens."""
    return EventPrinter(pool.on_progress) if pool.on_progress else None


def command_reason(err: auto.CommandError) -> str:
    """The engine's own error lines, without the command line or environment."""
    text = str(getattr(err, "stderr", "") or "") or str(err)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return " | ".join((errors or lines)[-4:])[:1500]


def targeted_up(
    pool: OperatedStack,
    stack: auto.Stack,
    result: OperationResult,
    target: list[str],
    refresh: bool = False,
) -> Mapping[str, Any]:
    """One `up` of just `target` (URNs); the result's changes, instances and surges are what
    the run reports. Returns the run's outputs."""
    reply = stack.up(
        target=target,
        refresh=refresh,
        on_event=progress_printer(pool),
        color="never",
        suppress_outputs=True,
    )
    result.changes = changes_from_summary(reply.summary.resource_changes)
    result.instances = instances_of(reply.outputs)
    result.surges = instances_of(reply.outputs, "surges")
    return reply.outputs
