"""Accounts, CAM roles with trust policies, OIDC identity providers and STS temporary keys.

The real cloud keeps accounts apart: a key pair belongs to one account (its uin), a role to the
account that made it, and what a role's temporary keys launch lands in the role's account. A
role's trust policy says who may assume it: other accounts (AssumeRole, signed with their keys,
optionally with an external id) and OIDC issuers with the subjects they vouch for
(AssumeRoleWithWebIdentity, with an RS256 JWT the issuer signed, checked against its JWKS).
Temporary keys carry a token that every call signed with them must send (X-TC-Token); a call
with a missing, wrong or expired token is refused as the API does (AuthFailure.TokenFailure).
"""

import base64
import dataclasses
import fnmatch
import json
import secrets
import string
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from pydantic import BaseModel, ConfigDict, Field

from spotpool.emulator.errors import ApiError

DEFAULT_ACCOUNT = "100000000001"  # the account the emulator's own key pair belongs to
MAX_DURATION_SECONDS = 43200
_ALPHABET = string.ascii_letters + string.digits


class _Admin(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")


class AccountKey(_Admin):
    """An account's key pair; `Allow`/`Deny` make it a sub-user's key whose CAM policy allows
    those actions (`service:Action`, `*` matching anything) and denies those (a deny
    wins); neither: the account's root key, allowed everything."""

    account: str = Field(alias="Account", pattern=r"^[0-9]{5,20}$")
    secret_id: str = Field(alias="SecretId", min_length=8)
    secret_key: str = Field(alias="SecretKey", min_length=8)
    allow: list[str] | None = Field(None, alias="Allow")
    deny: list[str] = Field(default_factory=list, alias="Deny")


class OidcTrust(_Admin):
    """One OIDC issuer and the subjects (exact, or ending in `*`) a role trusts from it."""

    issuer: str = Field(alias="Issuer")
    subjects: list[str] = Field(alias="Subjects", min_length=1)


class Role(_Admin):
    account: str = Field(alias="Account", pattern=r"^[0-9]{5,20}$")
    name: str = Field(alias="RoleName", min_length=1)
    trusted_accounts: list[str] = Field(default_factory=list, alias="TrustedAccounts")
    trusted_oidc: list[OidcTrust] = Field(default_factory=list, alias="TrustedOidc")
    external_id: str | None = Field(None, alias="ExternalId")

    @property
    def arn(self) -> str:
        return f"qcs::cam::uin/{self.account}:roleName/{self.name}"


class OidcProvider(_Admin):
    """An identity provider as CAM registers it: name (ProviderId), issuer, audiences, keys."""

    name: str = Field(alias="Name")
    issuer: str = Field(alias="Issuer")
    client_ids: list[str] = Field(alias="ClientIds", min_length=1)  # accepted audiences
    jwks: dict[str, Any] = Field(alias="Jwks")


class IamSettings(_Admin):
    """What `--iam FILE` and POST /_emulator/iam take: added to (or replacing, by key) what
    the emulator already has."""

    keys: list[AccountKey] = Field(default_factory=list, alias="Keys")
    roles: list[Role] = Field(default_factory=list, alias="Roles")
    oidc_providers: list[OidcProvider] = Field(default_factory=list, alias="OidcProviders")
    max_lifetime: int | None = Field(None, ge=1, alias="MaxLifetimeSeconds")


@dataclass(frozen=True)
class Principal:
    """Who signed a call: the account it lands in, and how it is named."""

    account: str
    arn: str
    kind: str  # "Root" for an account's own keys, "AssumedRole" for temporary keys
    user_id: str
    allow: tuple[str, ...] | None = None  # a CAM policy's allowed actions; None: all
    deny: tuple[str, ...] = ()

    def may(self, service: str, action: str) -> bool:
        """Whether its CAM policy allows `service:action` (a deny wins)."""
        name = f"{service}:{action}"
        if any(fnmatch.fnmatchcase(name, p) for p in self.deny):
            return False
        return self.allow is None or any(fnmatch.fnmatchcase(name, p) for p in self.allow)


@dataclass(frozen=True)
class TemporaryKey:
    secret_id: str
    secret_key: str
    token: str
    expires: float
    principal: Principal


class Iam:
    """The emulator's identities; lives in the server's event loop (no locks)."""

    def __init__(self, own_keys: Mapping[str, str], max_lifetime: float | None = None) -> None:
        self.max_lifetime = max_lifetime  # shorter lives than asked, for tests
        self._keys: dict[str, tuple[str, Principal]] = {
            secret_id: (secret_key, _root(DEFAULT_ACCOUNT))
            for secret_id, secret_key in own_keys.items()
        }
        self._temporary: dict[str, TemporaryKey] = {}
        self.roles: dict[str, Role] = {}
        self.providers: dict[str, OidcProvider] = {}

    def configure(self, settings: IamSettings) -> None:
        for key in settings.keys:
            principal = _root(key.account)
            if key.allow is not None or key.deny:
                principal = dataclasses.replace(
                    principal,
                    allow=tuple(key.allow) if key.allow is not None else None,
                    deny=tuple(key.deny),
                )
            self._keys[key.secret_id] = (key.secret_key, principal)
        self.roles.update({role.arn: role for role in settings.roles})
        self.providers.update({p.name: p for p in settings.oidc_providers})
        if settings.max_lifetime is not None:
            self.max_lifetime = settings.max_lifetime

    def describe(self) -> dict[str, Any]:
        """The admin view: roles and providers in full, keys by SecretId only."""
        return {
            "Keys": [
                {"Account": p.account, "SecretId": s} for s, (_, p) in sorted(self._keys.items())
            ],
            "Roles": [r.model_dump(by_alias=True) for r in self.roles.values()],
            "OidcProviders": [
                p.model_dump(by_alias=True, exclude={"jwks"}) for p in self.providers.values()
            ],
            "MaxLifetimeSeconds": self.max_lifetime,
            "TemporaryKeys": len(self._temporary),
        }

    def issued(self) -> list[dict[str, Any]]:
        """Every temporary key still held, secrets included: for tests that search a world's
        files for leaked credentials (the emulator guards nothing real)."""
        return [
            {"SecretId": k.secret_id, "SecretKey": k.secret_key, "Token": k.token,
             "Account": k.principal.account, "ExpiredTime": int(k.expires)}
            for k in self._temporary.values()
        ]  # fmt: skip

    # -- signing ---------------------------------------------------------------------------
    @property
    def secret_keys(self) -> Mapping[str, str]:
        """SecretId -> SecretKey for the signature check, temporary keys included."""
        return _SecretKeys(self)

    def principal(self, secret_id: str, token: str | None, now: float) -> Principal:
        """Who a verified signature belongs to; a temporary key's token must come along and
        be alive (AuthFailure.TokenFailure otherwise, as the API answers)."""
        temporary = self._temporary.get(secret_id)
        if temporary is None:
            return self._keys[secret_id][1]
        if not token:
            raise ApiError(
                "AuthFailure.TokenFailure",
                "The SecretId is a temporary key: send its token (X-TC-Token).",
            )
        if not secrets.compare_digest(token, temporary.token):
            raise ApiError("AuthFailure.TokenFailure", "The token is not valid for this SecretId.")
        if now >= temporary.expires:
            raise ApiError(
                "AuthFailure.TokenFailure",
                f"The token expired at {int(temporary.expires)} (now {int(now)}): "
                "request new temporary credentials.",
            )
        return temporary.principal

    # -- STS -------------------------------------------------------------------------------
    def assume_role(
        self,
        caller: Principal,
        role_arn: str,
        session: str,
        duration: int,
        external_id: str | None,
        now: float,
    ) -> TemporaryKey:
        _check_duration(duration)
        role = self._role(role_arn)
        if caller.account not in role.trusted_accounts:
            raise ApiError(
                "UnauthorizedOperation",
                f"Account {caller.account} is not in the trust policy of role {role_arn}: "
                f"add it to the role's trust policy (principal qcs::cam::uin/{caller.account}"
                ":root) or assume the role with another account's keys.",
            )
        if role.external_id is not None and external_id != role.external_id:
            raise ApiError(
                "UnauthorizedOperation",
                f"The trust policy of role {role_arn} requires an ExternalId; the one given "
                "does not match.",
            )
        return self._issue(role, session, duration, now)

    def assume_role_with_web_identity(
        self, provider_id: str, token: str, role_arn: str, session: str, duration: int, now: float
    ) -> TemporaryKey:
        _check_duration(duration)
        provider = self.providers.get(provider_id)
        if provider is None:
            raise ApiError(
                "InvalidParameter.ParamError",
                f"No identity provider named `{provider_id}` in this account.",
            )
        claims = _verified_claims(token, provider, now)
        role = self._role(role_arn)
        subject = str(claims.get("sub", ""))
        trusted = any(
            trust.issuer == provider.issuer and any(_matches(s, subject) for s in trust.subjects)
            for trust in role.trusted_oidc
        )
        if not trusted:
            raise ApiError(
                "UnauthorizedOperation",
                f"The trust policy of role {role_arn} does not trust subject `{subject}` of "
                f"issuer {provider.issuer}: add it to the role's trust policy (oidc:sub).",
            )
        return self._issue(role, session, duration, now)

    def _role(self, role_arn: str) -> Role:
        role = self.roles.get(role_arn)
        if role is None:
            raise ApiError("ResourceNotFound.RoleNotFound", f"The role {role_arn} does not exist.")
        return role

    def _issue(self, role: Role, session: str, duration: int, now: float) -> TemporaryKey:
        life = min(duration, self.max_lifetime or duration)
        self._forget_expired(now)
        key = TemporaryKey(
            secret_id="AKID" + _random(32),
            secret_key=_random(32),
            token=_random(96),
            expires=now + life,
            principal=Principal(
                account=role.account,
                arn=f"qcs::sts:uin/{role.account}:assumed-role/{role.name}/{session}",
                kind="AssumedRole",
                user_id=f"{role.name}:{session}",
            ),
        )
        self._temporary[key.secret_id] = key
        return key

    def _forget_expired(self, now: float) -> None:
        # Kept an hour past expiry, so a late call gets TokenFailure, not SecretIdNotFound.
        for secret_id in [s for s, k in self._temporary.items() if k.expires + 3600 < now]:
            del self._temporary[secret_id]


class _SecretKeys(Mapping[str, str]):
    def __init__(self, iam: Iam) -> None:
        self._iam = iam

    def __getitem__(self, secret_id: str) -> str:
        temporary = self._iam._temporary.get(secret_id)
        if temporary is not None:
            return temporary.secret_key
        return self._iam._keys[secret_id][0]

    def __iter__(self) -> Iterator[str]:
        yield from self._iam._keys
        yield from self._iam._temporary

    def __len__(self) -> int:
        return len(self._iam._keys) + len(self._iam._temporary)


def _check_duration(duration: int) -> None:
    if not 0 < duration <= MAX_DURATION_SECONDS:
        raise ApiError(
            "InvalidParameter.OverTimeError",
            f"DurationSeconds must be 1 to {MAX_DURATION_SECONDS}; got {duration}.",
        )


def _root(account: str) -> Principal:
    return Principal(
        account=account, arn=f"qcs::cam::uin/{account}:uin/{account}", kind="Root", user_id=account
    )


def _random(length: int) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


def _matches(pattern: str, subject: str) -> bool:
    if pattern.endswith("*"):
        return subject.startswith(pattern[:-1])
    return pattern == subject


def _b64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _token_error(why: str) -> ApiError:
    return ApiError("InvalidParameter.WebIdentityTokenError", f"WebIdentityToken: {why}.")


def _verified_claims(token: str, provider: OidcProvider, now: float) -> dict[str, Any]:
    """The JWT's claims once its RS256 signature, issuer, audience and times check out."""
    try:
        header_b64, payload_b64, signature_b64 = token.split(".")
        header = json.loads(_b64(header_b64))
        claims = json.loads(_b64(payload_b64))
        signature = _b64(signature_b64)
    except ValueError:
        raise _token_error("not a JWT") from None
    if header.get("alg") != "RS256":
        raise _token_error(f"algorithm {header.get('alg')!r} is not RS256")
    keys = [
        k
        for k in provider.jwks.get("keys", [])
        if k.get("kty") == "RSA" and (not header.get("kid") or k.get("kid") == header.get("kid"))
    ]
    signed = f"{header_b64}.{payload_b64}".encode()
    if not any(_rsa_verifies(key, signed, signature) for key in keys):
        raise _token_error(f"its signature does not match the keys of issuer {provider.issuer}")
    if claims.get("iss") != provider.issuer:
        raise _token_error(f"issuer {claims.get('iss')!r} is not {provider.issuer}")
    audiences = claims.get("aud")
    audiences = [audiences] if isinstance(audiences, str) else list(audiences or [])
    if not set(audiences) & set(provider.client_ids):
        raise _token_error(f"audience {audiences} is none of {provider.client_ids}")
    if float(claims.get("exp", 0)) <= now:
        raise _token_error("it has expired")
    if float(claims.get("nbf", 0)) > now + 60:
        raise _token_error("it is not valid yet")
    return dict(claims)


def _rsa_verifies(jwk: Mapping[str, Any], signed: bytes, signature: bytes) -> bool:
    try:
        numbers = rsa.RSAPublicNumbers(
            int.from_bytes(_b64(jwk["e"]), "big"), int.from_bytes(_b64(jwk["n"]), "big")
        )
        numbers.public_key().verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
        return True
    except (InvalidSignature, KeyError, ValueError):
        return False
