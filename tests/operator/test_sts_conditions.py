"""An STS refusal's condition names the real cause first (its own reason, STS's words), then
the advice: a wrong externalId is `ExternalIdMismatch`, not advice to edit the trust policy."""

import pytest
from spotpool_operator.basics.credentials import sts_problem

from spotpool.engine.tencent.sts import StsError

pytestmark = pytest.mark.unit

ROLE = "qcs::cam::uin/200000000002:roleName/spotpool-launcher"
# What the emulator (as CAM) answers for each: the same code for two causes.
WRONG_EXTERNAL_ID = StsError(
    "UnauthorizedOperation",
    f"The trust policy of role {ROLE} requires an ExternalId; the one given does not match.",
)
NOT_TRUSTED = StsError(
    "UnauthorizedOperation",
    f"Account 100000000001 is not in the trust policy of role {ROLE}: add it to the role's "
    "trust policy (principal qcs::cam::uin/100000000001:root) or assume the role with another "
    "account's keys.",
)


def test_a_wrong_external_id_is_named_before_any_advice() -> None:
    problem = sts_problem(WRONG_EXTERNAL_ID, ROLE)
    assert problem.reason == "ExternalIdMismatch"
    cause, _, advice = problem.message.partition("To fix:")
    assert "ExternalId; the one given does not match" in cause
    assert "externalId" in advice and "trust policy" not in cause.split(ROLE, 1)[0]


def test_an_untrusted_caller_keeps_its_reason_with_the_cause_first() -> None:
    problem = sts_problem(NOT_TRUSTED, ROLE)
    assert problem.reason == "RoleNotTrusted"
    cause, _, advice = problem.message.partition("To fix:")
    assert "Account 100000000001 is not in the trust policy" in cause
    assert "(UnauthorizedOperation)" in cause
    assert "add the caller" in advice


def test_an_unknown_code_says_what_sts_said() -> None:
    problem = sts_problem(StsError("InternalError", "try later"), ROLE)
    assert problem.reason == "AssumeRoleFailed"
    assert problem.message.startswith(f"STS refused role {ROLE}: try later (InternalError)")
