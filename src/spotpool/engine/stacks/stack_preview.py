"""What an `up` of a pool's stack with a config would change, leaving no trace: a throwaway
workspace (a copy of the stack's settings file, for its encryption salt), no lock, no memory
of the stack; a pool without a stack yet is previewed against an empty throwaway backend."""

import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from pulumi import automation as auto

from spotpool.api.stackconfig import PROJECT, StackConfig
from spotpool.engine.basics.errors import EngineError
from spotpool.engine.basics.results import (
    OperationKind,
    OperationResult,
    changes_by_resource,
    changes_from_summary,
)
from spotpool.engine.basics.stack_view import WorkspaceStack
from spotpool.engine.launches.notice_nonces import held_nonces, plan_nonces
from spotpool.engine.runs.config_writer import write_config
from spotpool.engine.runs.stack_operation import command_reason
from spotpool.engine.runs.stack_workspace import forget_work_dir, own_work_dir, select_stack
from spotpool.engine.stacks.disruption import replaced_slots
from spotpool.engine.state.stack_state import (
    SLOT_TYPE,
    carried_over,
    cluster_in,
    ids_by_slot,
    state_of,
)


def preview(
    pool: WorkspaceStack,
    config: StackConfig,
    login_password: str | None,
    keep_secret_inputs: Sequence[str],
) -> OperationResult:
    """The preview of an `up` with `config` (see `PoolStack.preview`)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="spotpool-preview-") as tmp:
        work_dir = Path(tmp) / "workspace"
        work_dir.mkdir()
        settings_file = own_work_dir(pool) / f"Pulumi.{pool.name}.yaml"
        copied = work_dir / settings_file.name
        if settings_file.exists():  # keeps the stack's encryption salt (if this passphrase's)
            shutil.copy2(settings_file, copied)
        try:
            try:
                stack = select_stack(pool, work_dir=work_dir, create=False)
            except auto.StackNotFoundError:
                # A new pool: a new stack in the throwaway backend, with no settings of
                # another stack of that name (a by-hand run's, another backend's).
                copied.unlink(missing_ok=True)
                stack = select_stack(pool, work_dir=work_dir, backend=f"file://{tmp}")
            state = state_of(stack)
            # As an up plans it: the slots' fallbacks and adoptions carried over.
            config = carried_over(config, state, ids_by_slot(state))
            nonces = plan_nonces(held_nonces(state), config.count)
            write_config(pool, stack, config, login_password, tag=False, nonces=nonces)
            held_by = cluster_in(state)  # a preview by hand tags as the stack's operator did
            if pool.settings.cluster_id is None and held_by:
                stack.set_config(f"{PROJECT}:clusterId", auto.ConfigValue(held_by))
            if keep_secret_inputs:
                kept = auto.ConfigValue(json.dumps(sorted(keep_secret_inputs)))
                stack.set_config(f"{PROJECT}:keepSecretInputs", kept)
            lines: list[str] = []
            steps: list[tuple[str, str]] = []  # (urn, op) of every instance's step
            reply = stack.preview(
                diff=True,
                color="never",
                on_output=lines.append,
                on_event=lambda event: _instance_step(event, steps),
            )
        except auto.CommandError as err:
            raise EngineError(
                f"preview of stack {pool.name} failed: {command_reason(err)}"
            ) from None
        finally:
            forget_work_dir(pool.settings.work_root, work_dir)
    return OperationResult(
        kind=OperationKind.PREVIEW,
        stack=pool.name,
        changes=changes_from_summary(reply.change_summary),
        instance_changes=changes_by_resource(steps),
        replaced_slots=replaced_slots(steps),
        diff="\n".join(lines),
        seconds=round(time.monotonic() - started, 2),
    )


def _instance_step(event: auto.EngineEvent, steps: list[tuple[str, str]]) -> None:
    pre = event.resource_pre_event
    if pre is not None and pre.metadata.type == SLOT_TYPE:
        steps.append((pre.metadata.urn, str(pre.metadata.op.value)))
