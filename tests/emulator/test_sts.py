"""STS in the emulator, through the official SDK: AssumeRole across accounts (trust policy,
external id), AssumeRoleWithWebIdentity (an OIDC issuer's RS256 token), GetCallerIdentity, the
temporary keys' token and expiry, and accounts kept apart."""

import time
from typing import Any

import pytest
from tencentcloud.common import credential
from tencentcloud.common.common_client import CommonClient
from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException
from tencentcloud.cvm.v20170312 import cvm_client, models

from tests.emulator.harness import REGION, EmulatorProcess, describe, run_spot, wait_until
from tests.sts_world import (
    ACCOUNT_A,
    ACCOUNT_B,
    ACCOUNT_C,
    PROVIDER,
    ROLE_B,
    Issuer,
    configure,
    role,
)

pytestmark = pytest.mark.integration


def _sts(emulator: EmulatorProcess, cred: Any = None) -> CommonClient:
    cred = cred or credential.Credential(emulator.secret_id, emulator.secret_key)
    return CommonClient("sts", "2018-08-13", cred, REGION, emulator._profile())


def _assume(emulator: EmulatorProcess, arn: str = ROLE_B, **extra: Any) -> dict[str, Any]:
    params = {"RoleArn": arn, "RoleSessionName": "test", "DurationSeconds": 900, **extra}
    reply: dict[str, Any] = _sts(emulator).call_json("AssumeRole", params)["Response"]
    return reply


def _temporary(reply: dict[str, Any], token: str | None = None) -> Any:
    found = reply["Credentials"]
    return credential.Credential(
        found["TmpSecretId"], found["TmpSecretKey"], found["Token"] if token is None else token
    )


def _cvm(emulator: EmulatorProcess, cred: Any) -> cvm_client.CvmClient:
    return cvm_client.CvmClient(cred, REGION, emulator._profile())


def _code(call: Any) -> str:
    with pytest.raises(TencentCloudSDKException) as raised:
        call()
    return str(raised.value.code)


def test_a_role_assumed_with_account_as_keys_launches_into_account_b(
    emulator: EmulatorProcess,
) -> None:
    configure(emulator, Roles=[role(trusted_accounts=[ACCOUNT_A])])
    reply = _assume(emulator)
    assert set(reply) >= {"Credentials", "ExpiredTime", "Expiration", "RequestId"}
    assert set(reply["Credentials"]) == {"Token", "TmpSecretId", "TmpSecretKey"}
    as_b = _temporary(reply)

    me = _sts(emulator, as_b).call_json("GetCallerIdentity", {})["Response"]
    assert me["AccountId"] == ACCOUNT_B and me["Type"] == "AssumedRole"
    root = _sts(emulator).call_json("GetCallerIdentity", {})["Response"]
    assert root["AccountId"] == ACCOUNT_A

    launched = run_spot(_cvm(emulator, as_b), count=2)
    assert {i["InstanceId"] for i in describe(_cvm(emulator, as_b))[1]} == set(launched)
    assert describe(emulator.cvm()) == (0, [])  # account A sees none of B's instances
    assert _code(lambda: emulator.cvm().TerminateInstances(_terminate(launched))) == (
        "InvalidInstanceId.NotFound"
    )
    held = {i["InstanceId"]: i["Account"] for i in emulator.all_instances()}
    assert {held[i] for i in launched} == {ACCOUNT_B}


def _terminate(ids: list[str]) -> Any:
    request = models.TerminateInstancesRequest()
    request.InstanceIds = ids
    return request


def test_an_untrusted_caller_or_a_wrong_external_id_is_refused(
    emulator: EmulatorProcess,
) -> None:
    configure(
        emulator,
        Roles=[
            role(trusted_accounts=[ACCOUNT_C]),
            role(name="with-external-id", trusted_accounts=[ACCOUNT_A], external_id="team-b-42"),
        ],
    )
    with pytest.raises(TencentCloudSDKException) as raised:
        _assume(emulator)
    assert raised.value.code == "UnauthorizedOperation"
    assert ACCOUNT_A in str(raised.value.message) and "trust policy" in str(raised.value.message)
    other = f"qcs::cam::uin/{ACCOUNT_B}:roleName/with-external-id"
    assert _code(lambda: _assume(emulator, other)) == "UnauthorizedOperation"
    assert _code(lambda: _assume(emulator, other, ExternalId="wrong")) == "UnauthorizedOperation"
    assert "Credentials" in _assume(emulator, other, ExternalId="team-b-42")
    missing = f"qcs::cam::uin/{ACCOUNT_B}:roleName/nobody"
    assert _code(lambda: _assume(emulator, missing)) == "ResourceNotFound.RoleNotFound"
    assert _code(lambda: _assume(emulator, other, DurationSeconds=50000)) == (
        "InvalidParameter.OverTimeError"
    )


def test_temporary_keys_need_their_token_and_expire(emulator: EmulatorProcess) -> None:
    configure(emulator, Roles=[role(trusted_accounts=[ACCOUNT_A])], MaxLifetimeSeconds=2)
    reply = _assume(emulator)
    assert reply["ExpiredTime"] <= time.time() + 3  # capped at 2 s, whatever was asked
    client = _cvm(emulator, _temporary(reply))
    assert describe(client) == (0, [])
    assert _code(lambda: describe(_cvm(emulator, _temporary(reply, token="")))) == (
        "AuthFailure.TokenFailure"
    )
    assert _code(lambda: describe(_cvm(emulator, _temporary(reply, token="forged")))) == (
        "AuthFailure.TokenFailure"
    )

    def refused() -> str | None:
        try:
            describe(client)
        except TencentCloudSDKException as error:
            return str(error.code)
        return None

    assert wait_until(refused, "the temporary keys to expire", timeout=30) == (
        "AuthFailure.TokenFailure"
    )


def test_a_web_identity_token_is_exchanged_for_a_roles_keys(emulator: EmulatorProcess) -> None:
    issuer, stranger = Issuer(), Issuer()
    configure(
        emulator,
        OidcProviders=[issuer.provider()],
        Roles=[role(subjects=["system:serviceaccount:spotpool-system:*"])],
    )
    sts = CommonClient("sts", "2018-08-13", None, REGION, emulator._profile())

    def exchange(token: str, provider: str = PROVIDER) -> dict[str, Any]:
        params = {"ProviderId": provider, "WebIdentityToken": token, "RoleArn": ROLE_B,
                  "RoleSessionName": "operator", "DurationSeconds": 3600}  # fmt: skip
        reply = sts.call_json("AssumeRoleWithWebIdentity", params, options={"SkipSign": True})
        found: dict[str, Any] = reply["Response"]
        return found

    as_b = _temporary(exchange(issuer.token()))
    me = _sts(emulator, as_b).call_json("GetCallerIdentity", {})["Response"]
    assert me["AccountId"] == ACCOUNT_B
    bad = "InvalidParameter.WebIdentityTokenError"
    assert _code(lambda: exchange(stranger.token())) == bad  # another issuer's key
    assert _code(lambda: exchange(issuer.token(audience="someone-else"))) == bad
    assert _code(lambda: exchange(issuer.token(lifetime=-10))) == bad
    assert _code(lambda: exchange("not-a-jwt")) == bad
    assert _code(lambda: exchange(issuer.token(subject="system:serviceaccount:x:y"))) == (
        "UnauthorizedOperation"
    )
    assert _code(lambda: exchange(issuer.token(), provider="nope")) == "InvalidParameter.ParamError"
    # The request log keeps no bearer token.
    calls = emulator.admin_ok("GET", "/_emulator/requests?action=AssumeRoleWithWebIdentity")
    assert all(
        str(c["Params"]["WebIdentityToken"]).startswith("sha256:") for c in calls["Requests"]
    )
