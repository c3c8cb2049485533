"""Where slots the cloud had no spot stock for go after a failed run: a `Replan` places them
(by default on the next of `instanceTypes`), and the run is tried again."""

from collections.abc import Callable, Iterable

from pulumi import automation as auto

from spotpool.api.stackconfig import StackConfig
from spotpool.engine.basics.results import OperationResult
from spotpool.engine.state.stack_state import slots_in, state_of
from spotpool.engine.tencent import cloud_errors

# Where slots the cloud had no stock for go next (None: nowhere); the default tries the next type.
Replan = Callable[[StackConfig, list[int]], StackConfig | None]


def next_type(config: StackConfig, slots: list[int]) -> StackConfig | None:
    """The default `Replan`: the slots on their next instance type."""
    return config.falling_back(slots)


def replanned(
    stack: auto.Stack,
    config: StackConfig,
    err: auto.CommandError,
    slots: Iterable[int],
    replan: Replan | None,
    result: OperationResult,
) -> StackConfig:
    """After a failed run: when the cloud had no stock for some of `slots`, the config with
    those placed elsewhere; otherwise (or with nowhere left to go) the error again."""
    if not cloud_errors.is_no_stock(str(err)):
        raise err
    placed = slots_in(state_of(stack))
    unplaced = [s for s in slots if s not in placed]
    moved = (replan or next_type)(config, unplaced) if unplaced else None
    if moved is None:
        raise err
    where = ", ".join(
        f"slot {s} → {moved.zone_of(s)} {moved.type_of(s)}"
        + (" on-demand" if moved.charge_of(s) is not moved.charge_type else "")
        for s in unplaced
    )
    result.recovered.append(f"no spot stock: {where}")
    return moved
