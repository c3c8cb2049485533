"""What the engine's modules need of a pool's stack. `PoolStack` (stack.py) is one of each;
the modules take these views instead of importing stack.py, which imports them.

- `StackView`: its name, its pool, the engine settings, and the cloud credentials and region
  (recovery, the fast path and its launch intents);
- `WorkspaceStack`: that, and the environment of its Pulumi runs (the stack's workspace,
  this process's memory of it, its config);
- `OperatedStack`: that, and what the operation frame (stack_operation.py) reports to or
  keeps on it: the progress callback and the slots a killed run was creating.
"""

from collections.abc import Callable
from typing import Protocol

from spotpool.api.stackconfig import PoolIdentity
from spotpool.engine.basics.settings import EngineSettings
from spotpool.engine.tencent.credentials import Credentials


class StackView(Protocol):
    @property
    def name(self) -> str:
        """The Pulumi stack's name."""
        ...

    @property
    def pool(self) -> PoolIdentity: ...

    @property
    def settings(self) -> EngineSettings: ...

    @property
    def credentials(self) -> Credentials: ...

    @property
    def region(self) -> str: ...


class WorkspaceStack(StackView, Protocol):
    def run_env(self) -> dict[str, str]:
        """The environment of every Pulumi run of the stack (credentials travel only there):
        stack_workspace.pulumi_env."""
        ...


class OperatedStack(WorkspaceStack, Protocol):
    on_progress: Callable[[str], None] | None
    dead_run_slots: frozenset[int]  # a killed run was creating these (the last repair saw)
