"""STS (sts.tencentcloudapi.com, 2018-08-13): AssumeRole, AssumeRoleWithWebIdentity and
GetCallerIdentity, with the real API's parameters, response fields and error codes."""

from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import ConfigDict, Field

from spotpool.emulator import params
from spotpool.emulator.errors import ApiError
from spotpool.emulator.iam import TemporaryKey
from spotpool.emulator.services import Handler
from spotpool.emulator.world import Context

DEFAULT_DURATION = 1800  # the API's default when DurationSeconds is not given
T = TypeVar("T", bound=params.Params)
SESSION_NAME = r"^[\w+=,.@-]{2,128}$"


class _Params(params.Params):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class AssumeRoleParams(_Params):
    role_arn: str = Field(alias="RoleArn", min_length=1)
    role_session_name: str = Field(alias="RoleSessionName", pattern=SESSION_NAME)
    duration_seconds: int = Field(DEFAULT_DURATION, alias="DurationSeconds")
    policy: str | None = Field(None, alias="Policy", max_length=2048)
    external_id: str | None = Field(None, alias="ExternalId")


class WebIdentityParams(_Params):
    provider_id: str = Field(alias="ProviderId", min_length=1)
    web_identity_token: str = Field(alias="WebIdentityToken", min_length=1)
    role_arn: str = Field(alias="RoleArn", min_length=1)
    role_session_name: str = Field(alias="RoleSessionName", pattern=SESSION_NAME)
    duration_seconds: int = Field(7200, alias="DurationSeconds")


def _credentials(key: TemporaryKey) -> dict[str, Any]:
    expiration = datetime.fromtimestamp(key.expires, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "Credentials": {
            "Token": key.token,
            "TmpSecretId": key.secret_id,
            "TmpSecretKey": key.secret_key,
        },
        "ExpiredTime": int(key.expires),
        "Expiration": expiration,
    }


def _parse(model: type[T], body: dict[str, Any]) -> T:
    try:
        return params.parse(model, body)
    except ApiError as error:  # STS says ParamError where CVM says InvalidParameterValue
        raise ApiError("InvalidParameter.ParamError", error.message) from None


def assume_role(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    p = _parse(AssumeRoleParams, body)
    if ctx.principal is None:
        raise ApiError("AuthFailure.SignatureFailure", "AssumeRole must be signed.")
    key = ctx.world.iam.assume_role(
        ctx.principal, p.role_arn, p.role_session_name, p.duration_seconds, p.external_id, ctx.now
    )
    return _credentials(key)


def assume_role_with_web_identity(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    p = _parse(WebIdentityParams, body)
    key = ctx.world.iam.assume_role_with_web_identity(
        p.provider_id,
        p.web_identity_token,
        p.role_arn,
        p.role_session_name,
        p.duration_seconds,
        ctx.now,
    )
    return _credentials(key)


def get_caller_identity(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    if ctx.principal is None:
        raise ApiError("AuthFailure.SignatureFailure", "GetCallerIdentity must be signed.")
    who = ctx.principal
    return {
        "Arn": who.arn,
        "AccountId": who.account,
        "UserId": who.user_id,
        "PrincipalId": who.account if who.kind == "Root" else who.user_id,
        "Type": who.kind,
    }


STS_ACTIONS: dict[str, Handler] = {
    "AssumeRole": assume_role,
    "AssumeRoleWithWebIdentity": assume_role_with_web_identity,
    "GetCallerIdentity": get_caller_identity,
}
# Called without a signature (Authorization: SKIP): the web identity token is the proof.
UNSIGNED_ACTIONS = frozenset({"AssumeRoleWithWebIdentity"})
