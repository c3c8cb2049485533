"""Read-only views of the pools' stacks in a backend: what `spotpool stacks` and previews use.

Needs only the backend and the passphrase (outputs are decrypted for display), never cloud
credentials, and never writes: stacks are selected, not created.
"""

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pulumi import automation as auto
from pydantic import Field

from spotpool.api.drift import InstanceDrift
from spotpool.api.spec import Model
from spotpool.api.stackconfig import PROJECT, StackConfig, split_stack_name
from spotpool.api.status import Operation
from spotpool.engine.basics.results import SlotOutput, changes_from_summary
from spotpool.engine.basics.settings import EngineSettings
from spotpool.engine.runs.stack_workspace import pulumi_command
from spotpool.engine.state import keyserver
from spotpool.engine.state.drift import drift_in
from spotpool.engine.state.stack_state import instances_of


class StackView(Model):
    name: str
    namespace: str
    pool: str
    uid: str | None = None
    config: StackConfig | None = None
    instances: list[SlotOutput] = Field(default_factory=list)
    last_operation: Operation | None = None
    last_refresh: Operation | None = Field(
        None, description="the last refresh: what it changed is the drift it found"
    )
    drift: list[InstanceDrift] = Field(
        default_factory=list,
        description="instances the last refresh found changed outside the operator: each "
        "field as the stack sets it and as the cloud has it",
    )


@contextmanager
def _workspace(settings: EngineSettings) -> Iterator[auto.LocalWorkspace]:
    """A workspace in a throwaway directory: reading leaves no file behind."""
    with tempfile.TemporaryDirectory(prefix="spotpool-inventory-") as work_dir:
        yield _local_workspace(settings, work_dir)


def _local_workspace(settings: EngineSettings, work_dir: str) -> auto.LocalWorkspace:
    return auto.LocalWorkspace(
        work_dir=work_dir,
        pulumi_command=pulumi_command(settings.tools_dir.parent),
        env_vars={
            **settings.passphrase_env(),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            **keyserver.service_for(settings.passphrase.get_secret_value()).env(),
        },
        project_settings=auto.ProjectSettings(
            name=PROJECT, runtime="python", backend=auto.ProjectBackend(url=settings.backend_url)
        ),
    )


def stack_names(settings: EngineSettings) -> list[str]:
    """Stacks of the `spotpool` project that name a pool (`<namespace>.<name>`)."""
    names = []
    with _workspace(settings) as workspace:
        summaries = workspace.list_stacks()
    for summary in summaries:
        short = summary.name.rsplit("/", 1)[-1]
        if "." in short:
            names.append(short)
    return sorted(names)


def view(settings: EngineSettings, name: str) -> StackView:
    namespace, pool = split_stack_name(name)
    with _workspace(settings) as workspace:
        stack = auto.Stack.select(name, workspace)
        outputs = stack.outputs()
        tags = stack.list_tags()
        history = stack.history(page_size=10, show_secrets=False)
        state = stack.export_stack().deployment or {}
    raw_config: Any = outputs["config"].value if "config" in outputs else None
    refreshes = [h for h in history if h.kind == "refresh"]
    return StackView(
        name=name,
        namespace=namespace,
        pool=pool,
        uid=tags.get("spotpool:uid"),
        config=StackConfig.model_validate(raw_config) if raw_config else None,
        instances=instances_of(outputs),
        last_operation=_operation(history[0]) if history else None,
        last_refresh=_operation(refreshes[0]) if refreshes else None,
        drift=drift_in(state),
    )


def _operation(summary: auto.UpdateSummary) -> Operation:
    return Operation(
        kind=summary.kind,
        result=summary.result,
        start_time=summary.start_time,
        end_time=summary.end_time,
        changes=changes_from_summary(summary.resource_changes),
    )
