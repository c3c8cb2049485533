"""Identities for the STS tests: accounts, roles and an OIDC issuer of the test's own, set in a
running emulator through /_emulator/iam, and JWTs that issuer signs."""

import base64
import json
import time
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from spotpool.cluster.oidc import jwks
from spotpool.localworld.emulator import EmulatorProcess

ACCOUNT_A = "100000000001"  # the emulator's own key pair's account
ACCOUNT_B = "100000000002"
ACCOUNT_C = "100000000003"
ROLE_B = f"qcs::cam::uin/{ACCOUNT_B}:roleName/spotpool-launcher"
ISSUER = "https://oidc.test.local"
AUDIENCE = "sts.cloud.tencent.com"
PROVIDER = "test-cluster"
SUBJECT = "system:serviceaccount:spotpool-system:spotpool"


def role(
    account: str = ACCOUNT_B,
    name: str = "spotpool-launcher",
    trusted_accounts: list[str] | None = None,
    subjects: list[str] | None = None,
    issuer: str = ISSUER,
    external_id: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "Account": account,
        "RoleName": name,
        "TrustedAccounts": trusted_accounts or [],
        "TrustedOidc": [{"Issuer": issuer, "Subjects": subjects}] if subjects else [],
    }
    if external_id is not None:
        body["ExternalId"] = external_id
    return body


class Issuer:
    """An OIDC issuer: an RSA key, its JWKS, and tokens it signs."""

    def __init__(self, issuer: str = ISSUER) -> None:
        self.issuer = issuer
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = self.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.jwks = jwks(pem)

    def provider(self, name: str = PROVIDER) -> dict[str, Any]:
        return {"Name": name, "Issuer": self.issuer, "ClientIds": [AUDIENCE], "Jwks": self.jwks}

    def token(self, subject: str = SUBJECT, audience: str = AUDIENCE, lifetime: float = 600) -> str:
        now = int(time.time())
        header = {"alg": "RS256", "kid": self.jwks["keys"][0]["kid"], "typ": "JWT"}
        claims = {"iss": self.issuer, "sub": subject, "aud": [audience], "iat": now,
                  "nbf": now, "exp": now + int(lifetime)}  # fmt: skip
        signed = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = self.key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signed}.{_b64(signature)}"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def configure(emulator: EmulatorProcess, **settings: Any) -> dict[str, Any]:
    """POST /_emulator/iam (Keys, Roles, OidcProviders, MaxLifetimeSeconds)."""
    reply: dict[str, Any] = emulator.admin_ok("POST", "/_emulator/iam", settings)
    return reply
