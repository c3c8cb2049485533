"""Why an operation on a pool failed, as one CamelCase reason and a sentence for a person."""

from pulumi.automation import CommandError

from spotpool.engine.basics.errors import IdentityConflict, StackHeldByAnotherCluster
from spotpool.engine.stacks.stack import EngineError, OperationTimeout, StackLockedError
from spotpool.engine.tencent.cloud_errors import Kind, codes_in

# The condition reason for each class of cloud error (engine/tencent/cloud_errors.py classifies
# codes).
_REASONS = {
    Kind.NO_STOCK: "ResourceInsufficient",
    Kind.QUOTA: "QuotaExceeded",
    Kind.THROTTLED: "Throttled",
    Kind.AUTH: "AuthFailure",
    Kind.INVALID: "CloudRejected",
    Kind.TRANSIENT: "CloudError",
}


class PoolProblem(Exception):
    """A failure of one pool, said the way its status condition and Event say it."""

    def __init__(self, reason: str, message: str, permanent: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.permanent = permanent  # retrying cannot help until the spec changes


def classify(error: BaseException) -> PoolProblem:
    """Turn any failure into a PoolProblem; the message never holds more than the cause says."""
    if isinstance(error, PoolProblem):
        return error
    if isinstance(error, IdentityConflict):
        return PoolProblem("IdentityConflict", str(error))
    if isinstance(error, StackHeldByAnotherCluster):
        return PoolProblem("StackHeldByAnotherCluster", str(error))
    if isinstance(error, StackLockedError):
        return PoolProblem("StackLocked", str(error))
    if isinstance(error, OperationTimeout):
        return PoolProblem("OperationTimeout", str(error))
    if isinstance(error, EngineError | CommandError):
        text = str(error) if isinstance(error, EngineError) else _command_reason(error)
        for found in codes_in(text):
            reason = _REASONS.get(found.kind)
            if found.code.startswith("UnauthorizedOperation"):
                reason = "Unauthorized"
            if reason:
                return PoolProblem(reason, f"{found.advice} ({found.code})")
        if "currently locked" in text:
            return PoolProblem(
                "StackLocked",
                "another run holds the stack's lock (a person's `pulumi` command, or another "
                "operator): it is not broken unless its owner is provably gone; " + text[-300:],
            )
        if "no pulumi CLI" in text:
            return PoolProblem("ToolchainMissing", text)
        return PoolProblem("OperationFailed", text)
    return PoolProblem("InternalError", f"{type(error).__name__}: {error}")


def _command_reason(error: CommandError) -> str:
    """The last lines a failed pulumi command wrote to stderr (never its environment)."""
    text = str(getattr(error, "stderr", "") or "") or str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "pulumi failed: " + (" | ".join(lines[-3:]) or "no output")[:1000]
