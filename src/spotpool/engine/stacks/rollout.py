"""Roll a change that replaces instances out in batches (spec.disruption).

A preview of the new config tells which slots' instances it replaces (Pulumi's replace steps:
the stack program's replace_on_changes and the provider's ForceNew inputs decide). The slots are
planned into batches (disruption.plan_batches); each batch but the last is one targeted `up` of
its slots with the new config, the other slots keeping the instances they have (a targeted run
leaves untargeted resources as they are). A batch's delete-first slots lose their old instance
first (a targeted destroy of those instances), its surge slots are replaced create-before-delete
(the program's default), so at most count + maxSurge instances exist at any time. The last batch
is a full `up`, which converges everything else the change holds (count, tags, ...).

Each call previews again, so a rollout cut short (a failed batch, a restart) resumes with the
slots still to replace, never all of them at once.
"""

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spotpool.api.stackconfig import StackConfig
from spotpool.engine.basics.results import OperationKind, OperationResult
from spotpool.engine.runs.stack_operation import operation, progress_printer
from spotpool.engine.stacks.disruption import Batch, plan_batches
from spotpool.engine.stacks.replan import Replan
from spotpool.engine.stacks.stack import PoolStack
from spotpool.engine.state.stack_state import SLOT_TYPE
from spotpool.engine.state.urns import slot_of_urn


@dataclass
class Rollout:
    """What a rollout did: its batches, in order, and the result of each batch's `up`."""

    replaced: list[int]
    batches: list[Batch]
    results: list[OperationResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def last(self) -> OperationResult | None:
        return self.results[-1] if self.results else None


OnBatch = Callable[[int, Batch, OperationResult], None]


def roll_out(
    pool: PoolStack,
    config: StackConfig,
    max_unavailable: int,
    max_surge: int,
    protected: Iterable[int] = (),
    login_password: str | None = None,
    replan: Replan | None = None,
    on_batch: OnBatch | None = None,
    surge_room: Callable[[int], int] | None = None,
    order: Callable[[list[int]], list[int]] | None = None,
    before_batch: Callable[[list[int]], None] | None = None,
) -> Rollout:
    """Converge `pool` to `config`, replacing instances at most max_unavailable + max_surge
    slots at a time, the `protected` (do-not-disrupt) slots last. A change that replaces
    nothing, or fits in one batch without a delete-first slot, is one plain `up`.
    `surge_room(n)`: how many of the n surge instances a batch would make may be made (the
    namespace's limits, reserved before); it raises when the rollout cannot go on at all.
    `order(slots)`: the replaced slots in the order to take them (the operator's: emptiest
    node first); `before_batch(slots)`: called before a batch's instances are touched (the
    operator drains their nodes). The engine knows nothing of nodes: both come from outside."""
    started = time.monotonic()
    urns = _slot_urns(pool)
    preview = pool.preview(config, login_password)
    replaced = [s for s in preview.replaced_slots if s in urns and s < config.count]
    if surge_room is not None and replaced:
        max_surge = surge_room(min(max_surge, len(replaced)))
    rank = {s: n for n, s in enumerate(order(replaced))} if order and replaced else None
    batches = plan_batches(replaced, max_unavailable, max_surge, protected, rank)
    rollout = Rollout(replaced=replaced, batches=batches)
    if not batches:
        rollout.results.append(pool.up(config, login_password, replan=replan))
    for number, batch in enumerate(batches):
        last = number == len(batches) - 1
        if before_batch is not None:
            before_batch(batch.slots)
        if batch.delete_first:
            _delete_instances(pool, [urns[s] for s in batch.delete_first])
        result = pool.up(
            config,
            login_password,
            replan=replan,
            fresh=batch.delete_first,
            target=() if last else [urns[s] for s in batch.slots],
        )
        rollout.results.append(result)
        if on_batch is not None:
            on_batch(number, batch, result)
    rollout.seconds = round(time.monotonic() - started, 2)
    return rollout


def renew_slots(
    pool: PoolStack,
    config: StackConfig,
    slots: list[int],
    login_password: str | None = None,
    replan: Replan | None = None,
) -> OperationResult:
    """Replace these slots' instances although the cloud still runs them (the operator found
    them unusable: their node never became Ready), as a failed launch is replaced: one batch
    with the slots delete-first (a targeted destroy of their instances), then a targeted `up`
    that makes their successors; the other slots are left as they are."""
    urns = _slot_urns(pool)
    targets = [urns[s] for s in slots if s in urns]
    if targets:
        _delete_instances(pool, targets)
    return pool.up(config, login_password, replan=replan, fresh=slots, target=targets)


def _slot_urns(pool: PoolStack) -> dict[int, str]:
    """slot -> URN of its instance resource, as the stack's state records them (a slot keeps its
    URN across replacements)."""
    with operation(pool, OperationKind.UP) as (_stack, _result, state):
        return slot_urns(state)


def slot_urns(state: Mapping[str, Any]) -> dict[int, str]:
    return {
        slot: resource["urn"]
        for resource in state.get("resources") or []
        if resource.get("type") == SLOT_TYPE
        and resource.get("id")
        and (slot := slot_of_urn(resource.get("urn", ""))) is not None
    }


def _delete_instances(pool: PoolStack, urns: list[str]) -> None:
    """Delete these slots' instances (a targeted destroy: the rest of the stack stays); the
    batch's `up` then makes their successors with the new config."""
    with operation(pool, OperationKind.DESTROY) as (stack, _result, _state):
        stack.destroy(target=urns, on_event=progress_printer(pool), color="never")
