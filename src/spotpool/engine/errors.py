"""The engine's errors: messages for a person, never holding a secret."""


class EngineError(Exception):
    """A Pulumi operation failed."""


class StackLockedError(EngineError):
    """Another owner holds the stack's lock and is not provably gone: nothing was broken."""


class OperationTimeout(EngineError):
    """The operation ran past its time and its processes were killed."""
