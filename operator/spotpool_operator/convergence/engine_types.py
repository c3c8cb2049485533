"""What the operator needs from the engine: the part of a pool's stack it drives
(`PoolEngine`), how it gets one (`EngineFactory`), and the cheap cloud look-up of a pool's
live instances (`CloudLookup`)."""

from collections.abc import Callable
from typing import Protocol

from pydantic import SecretStr

from spotpool.api.stackconfig import PoolIdentity, StackConfig
from spotpool.engine.basics.results import OperationResult
from spotpool.engine.tencent.credentials import Credentials
from spotpool_operator.cloud.capacity import Replan


class PoolEngine(Protocol):
    """The part of `spotpool.engine.stacks.stack.PoolStack` the operator uses."""

    def up(
        self,
        config: StackConfig,
        login_password: str | None = None,
        refresh: bool = False,
        replan: Replan | None = None,
    ) -> OperationResult: ...

    def refresh(self) -> OperationResult: ...

    def replace_slots(
        self,
        config: StackConfig,
        slots: list[int],
        login_password: str | None = None,
        replan: Replan | None = None,
    ) -> OperationResult: ...

    def start_surge(
        self, config: StackConfig, slots: list[int], login_password: str | None = None
    ) -> OperationResult: ...

    def retire_surges(
        self, config: StackConfig, slots: list[int], login_password: str | None = None
    ) -> OperationResult: ...

    def destroy(self, remove_stack: bool = True) -> OperationResult: ...

    def forget(self) -> None: ...

    def state_instance_ids(self) -> dict[int, str]: ...

    def held_instance_ids(self) -> dict[str, str]: ...

    def applied_config(self) -> StackConfig | None: ...


EngineFactory = Callable[[PoolIdentity, Credentials, str, Callable[[str], None]], PoolEngine]
# Ids of the pool's live instances, straight from the cloud API (one cheap call, no Pulumi).
CloudLookup = Callable[[PoolIdentity, Credentials, str], set[str]]
NO_CREDENTIALS = Credentials(secret_id=SecretStr(""), secret_key=SecretStr(""))
