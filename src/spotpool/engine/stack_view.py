"""What recovery (recovery.py) needs of a pool's stack: its name, its pool, the engine
settings, and the cloud credentials and region. `PoolStack` (stack.py) is one; recovery
takes this view instead of importing stack.py, which imports recovery."""

from typing import Protocol

from spotpool.api.stackconfig import PoolIdentity
from spotpool.engine.credentials import Credentials
from spotpool.engine.settings import EngineSettings


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
