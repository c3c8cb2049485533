"""Why an operation on a pool failed, as one CamelCase reason and a sentence for a person."""

import re

from pulumi.automation import CommandError

from spotpool.engine.stack import EngineError

# Cloud error codes (Tencent Cloud API 3.0) in the engine's message, first match wins.
_CLOUD_CODES: list[tuple[str, str, str]] = [
    (
        r"AuthFailure[.\w]*",
        "AuthFailure",
        "the cloud refused the API key pair ({code}): check the credentials",
    ),
    (
        r"(ResourceInsufficient|ResourcesSoldOut|NoAvailableStock)[.\w]*",
        "ResourceInsufficient",
        "no spot capacity for this pool's instance type and zone ({code}); "
        "retrying, or add instanceTypes / availabilityZones fallbacks",
    ),
    (
        r"RequestLimitExceeded[.\w]*",
        "Throttled",
        "the cloud is throttling API calls ({code}); retrying later",
    ),
    (
        r"(UnauthorizedOperation|OperationDenied)[.\w]*",
        "Unauthorized",
        "the API key pair may not do this ({code}): check its CAM policy",
    ),
]


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
    if isinstance(error, EngineError | CommandError):
        text = str(error) if isinstance(error, EngineError) else _command_reason(error)
        for pattern, reason, template in _CLOUD_CODES:
            found = re.search(pattern, text)
            if found:
                return PoolProblem(reason, template.format(code=found.group(0)))
        if "no pulumi CLI" in text:
            return PoolProblem("ToolchainMissing", text)
        return PoolProblem("OperationFailed", text)
    return PoolProblem("InternalError", f"{type(error).__name__}: {error}")


def _command_reason(error: CommandError) -> str:
    """The last lines a failed pulumi command wrote to stderr (never its environment)."""
    text = str(getattr(error, "stderr", "") or "") or str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "pulumi failed: " + (" | ".join(lines[-3:]) or "no output")[:1000]
