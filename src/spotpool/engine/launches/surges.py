"""Surge instances: the replacement of a slot's instance started ahead of its reclaim (a
termination notice came), beside the instance the cloud is about to take.

`start_surge` makes them, `retire_surges` deletes those whose slot's instance outlived its
notice, and `forget_resources` drops a slot's own instance from the state when its surge
instance takes the slot (`PoolStack.replace_slots` promotes it). Each is one targeted `up`
(or none) inside the operation frame (stack_operation.py)."""

from pulumi import automation as auto

from spotpool.api.notices import SURGE_SUFFIX
from spotpool.api.stackconfig import StackConfig
from spotpool.engine.basics.results import OperationKind, OperationResult
from spotpool.engine.basics.stack_view import OperatedStack
from spotpool.engine.launches.notice_nonces import held_nonces, plan_nonces
from spotpool.engine.runs.config_writer import write_config
from spotpool.engine.runs.known_stacks import known_already, known_stack
from spotpool.engine.runs.stack_operation import operation, targeted_up
from spotpool.engine.state.stack_state import (
    applied_config_in,
    carried_over,
    ids_by_slot,
    instances_of,
    pinned,
)


def start_surge(
    pool: OperatedStack, config: StackConfig, slots: list[int], login_password: str | None
) -> OperationResult:
    """A surge instance beside each of `slots`' instances, in one targeted `up`; no run at all
    when none of `slots` has an instance in the state (see `PoolStack.start_surge`)."""
    known = known_already(pool)
    if known is not None and known.repaired and not set(slots) & set(known.urns):
        return OperationResult(kind=OperationKind.UP, stack=pool.name, seconds=0.0)
    with operation(pool, OperationKind.UP) as (stack, result, state):
        known = known_stack(pool)
        slots = sorted(s for s in slots if s in known.urns and s < config.count)
        if not slots:
            return result
        config = carried_over(config, state, ids_by_slot(state))
        config = pinned(config, applied_config_in(state), slots)
        surge = sorted({*slots, *(s for s in known.surges if s < config.count)})
        nonces = plan_nonces(held_nonces(state), config.count, surge)
        write_config(pool, stack, config, login_password, surge=surge, promote=[], nonces=nonces)
        targeted_up(pool, stack, result, [known.urns[s] + SURGE_SUFFIX for s in slots])
        known.surges = {s.slot: s.instance_id for s in result.surges}
    return result


def retire_surges(
    pool: OperatedStack, config: StackConfig, slots: list[int], login_password: str | None
) -> OperationResult:
    """Delete the surge instances of `slots` in one targeted `up`; the slots' own instances
    stay (see `PoolStack.retire_surges`)."""
    with operation(pool, OperationKind.UP) as (stack, result, state):
        known = known_stack(pool)
        retiring = sorted(s for s in slots if s in known.surges and s in known.urns)
        keep = sorted(s for s in known.surges if s not in retiring and s < config.count)
        config = pinned(config, applied_config_in(state), sorted(known.surges))
        nonces = plan_nonces(held_nonces(state), config.count, keep)
        write_config(pool, stack, config, login_password, surge=keep, promote=[], nonces=nonces)
        if retiring:
            targeted_up(pool, stack, result, [known.urns[s] + SURGE_SUFFIX for s in retiring])
        else:
            outputs = stack.outputs()
            result.instances = instances_of(outputs)
            result.surges = instances_of(outputs, "surges")
        known.surges = {s.slot: s.instance_id for s in result.surges}
    return result


def forget_resources(stack: auto.Stack, urns: list[str]) -> None:
    """Drop these resources from the state, leaving their instances alone (as `pulumi state
    delete`): a slot's instance the cloud is taking, whose surge instance takes its name."""
    deployment = stack.export_stack()
    state = dict(deployment.deployment or {})
    gone = set(urns)
    state["resources"] = [r for r in state.get("resources") or [] if r.get("urn") not in gone]
    stack.import_stack(auto.Deployment(version=deployment.version, deployment=state))
