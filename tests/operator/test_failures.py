"""Engine failures become reasons a person (and a program) can act on."""

import pytest
from spotpool_operator.basics.failures import PoolProblem, classify
from spotpool_operator.basics.settings import OperatorSettings

from spotpool.engine.stacks.stack import EngineError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("[TencentCloudSDKError] Code=AuthFailure.SecretIdNotFound, Message=...", "AuthFailure"),
        (
            "Code=ResourceInsufficient.SpecifiedInstanceType, Message=Spot stock",
            "ResourceInsufficient",
        ),
        ("Code=RequestLimitExceeded, Message=Your request frequency", "Throttled"),
        ("Code=UnauthorizedOperation.CamNoAuth", "Unauthorized"),
        ("no pulumi CLI at /x/bin: run `make toolchain`", "ToolchainMissing"),
        ("error: something else broke", "OperationFailed"),
    ],
)
def test_engine_errors_are_classified(message: str, reason: str) -> None:
    problem = classify(EngineError(f"up of stack team-a.gpu failed: {message}"))
    assert problem.reason == reason
    assert not problem.permanent


def test_cloud_code_is_named_in_the_message() -> None:
    problem = classify(EngineError("Code=ResourceInsufficient.SpecifiedInstanceType"))
    assert "ResourceInsufficient.SpecifiedInstanceType" in problem.message
    assert "no spot stock" in problem.message


def test_unexpected_errors_and_problems_pass_through() -> None:
    assert classify(RuntimeError("boom")).reason == "InternalError"
    problem = PoolProblem("SecretNotFound", "x")
    assert classify(problem) is problem


def test_backoff_doubles_and_caps(tmp_path: object) -> None:
    from tests.operator.fakes import settings

    opts: OperatorSettings = settings(tmp_path, backoff_base=10, backoff_max=300)  # type: ignore[arg-type]
    assert [opts.backoff(n) for n in range(7)] == [10, 20, 40, 80, 160, 300, 300]
    assert opts.backoff(10_000) == 300


def test_a_failed_pulumi_command_says_what_pulumi_said() -> None:
    from pulumi.automation import CommandError
    from pulumi.automation._cmd import CommandResult

    error = CommandError(CommandResult(stdout="", stderr="error: the lock is held\n", code=255))
    problem = classify(error)
    assert problem.reason == "OperationFailed"
    assert "the lock is held" in problem.message
