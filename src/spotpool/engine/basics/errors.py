"""The engine's errors: messages for a person, never holding a secret."""


class EngineError(Exception):
    """A Pulumi operation failed."""


class StackLockedError(EngineError):
    """Another owner holds the stack's lock and is not provably gone: nothing was broken."""


class OperationTimeout(EngineError):
    """The operation ran past its time and its processes were killed."""


class InstancesRemain(EngineError):
    """Destroy emptied the state, but instances tagged for the pool by this install are still
    in the cloud and not yet this writer's to terminate (young: a create may be in flight):
    the stack is kept, and deleting must wait and sweep again."""

    def __init__(self, stack: str, remaining: dict[str, str]) -> None:
        self.remaining = remaining  # instance id -> why it was left alone
        listed = "; ".join(f"{i} ({why})" for i, why in sorted(remaining.items()))
        super().__init__(
            f"stack {stack} destroyed, but {len(remaining)} instance(s) tagged for the pool are "
            f"still in the cloud: {listed}. The stack is kept; deleting sweeps again once they "
            "are old enough to terminate or gone"
        )


class IdentityConflict(EngineError):
    """Another live operator claims this cluster's identity (leftovers/claims.py): no run that
    could adopt, re-tag or terminate is started until a person resolves it."""


class StackHeldByAnotherCluster(EngineError):
    """The stack is run by another live cluster (its holder record or its instances' cluster
    tag): it is never `up`'d, re-tagged or destroyed from here."""

    def __init__(self, holder: str, message: str) -> None:
        super().__init__(message)
        self.holder = holder
