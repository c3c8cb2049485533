"""STS calls (sts.tencentcloudapi.com, 2018-08-13) through the official SDK's generic client:
AssumeRole signed with the caller's keys, AssumeRoleWithWebIdentity unsigned (the web identity
token is the proof)."""

from typing import Any

from pydantic import SecretStr
from tencentcloud.common import credential
from tencentcloud.common.common_client import CommonClient
from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException
from tencentcloud.common.profile.client_profile import ClientProfile
from tencentcloud.common.profile.http_profile import HttpProfile

from spotpool.api.identity import AssumeRole, role_account
from spotpool.engine.tencent.credentials import Credentials

SERVICE, VERSION = "sts", "2018-08-13"
STS_REGION = "ap-guangzhou"  # STS is global; the SDK wants a region all the same


class StsError(Exception):
    """STS refused: `code` is the API's error code, the message says what to fix."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _client(keys: Credentials | None, endpoint: str | None) -> CommonClient:
    profile = ClientProfile()
    if endpoint:
        scheme, _, host = endpoint.partition("://")
        profile = ClientProfile(httpProfile=HttpProfile(endpoint=host, protocol=scheme))
    cred = None
    if keys is not None:
        token = keys.token.get_secret_value() if keys.token else None
        cred = credential.Credential(
            keys.secret_id.get_secret_value(), keys.secret_key.get_secret_value(), token
        )
    return CommonClient(SERVICE, VERSION, cred, STS_REGION, profile)


def _call(
    client: CommonClient, action: str, params: dict[str, Any], unsigned: bool = False
) -> dict[str, Any]:
    options = {"SkipSign": True} if unsigned else None
    try:
        reply: dict[str, Any] = client.call_json(action, params, options=options)["Response"]
    except TencentCloudSDKException as error:
        raise StsError(str(error.code or "ClientError"), str(error.message)) from None
    return reply


def _temporary(reply: dict[str, Any], account: str, identity: str) -> Credentials:
    found = reply["Credentials"]
    return Credentials(
        secret_id=SecretStr(found["TmpSecretId"]),
        secret_key=SecretStr(found["TmpSecretKey"]),
        token=SecretStr(found["Token"]),
        expires=float(reply["ExpiredTime"]),
        account=account,
        identity=identity,
    )


def assume_role(
    keys: Credentials, role: AssumeRole, endpoint: str | None, identity: str
) -> Credentials:
    """The role's temporary credentials, asked for with `keys`."""
    params: dict[str, Any] = {
        "RoleArn": role.role_arn,
        "RoleSessionName": role.session_name,
        "DurationSeconds": role.duration_seconds,
    }
    if role.external_id is not None:
        params["ExternalId"] = role.external_id
    reply = _call(_client(keys, endpoint), "AssumeRole", params)
    return _temporary(reply, role_account(role.role_arn), identity)


def assume_role_with_web_identity(
    provider_id: str,
    web_identity_token: str,
    role: AssumeRole,
    endpoint: str | None,
    identity: str,
) -> Credentials:
    """The role's temporary credentials for a service-account token its issuer signed."""
    params = {
        "ProviderId": provider_id,
        "WebIdentityToken": web_identity_token,
        "RoleArn": role.role_arn,
        "RoleSessionName": role.session_name,
        "DurationSeconds": role.duration_seconds,
    }
    reply = _call(_client(None, endpoint), "AssumeRoleWithWebIdentity", params, unsigned=True)
    return _temporary(reply, role_account(role.role_arn), identity)
