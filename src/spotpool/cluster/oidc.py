"""The local cluster as an OIDC issuer: its service-account tokens are RS256 JWTs signed with
pki/sa.key under ISSUER; `jwks` gives the public half the way the API server's
/openid/v1/jwks does (same key id), so a cloud (the emulator's CAM) can trust the cluster the
way Tencent Cloud's CAM trusts a TKE cluster's issuer."""

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ISSUER = "https://kubernetes.default.svc.cluster.local"
# The audience the operator's token is asked for: STS, as TKE's pod identity does.
STS_AUDIENCE = "sts.cloud.tencent.com"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwks(public_key_pem: bytes) -> dict[str, Any]:
    """The JWKS of one RSA public key, with the key id kube-apiserver gives it (the
    unpadded base64url SHA-256 of its DER form)."""
    key = serialization.load_pem_public_key(public_key_pem)
    if not isinstance(key, rsa.RSAPublicKey):
        raise ValueError("the service-account key is not an RSA key")
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    numbers = key.public_numbers()
    return {
        "keys": [
            {
                "kty": "RSA",
                "alg": "RS256",
                "use": "sig",
                "kid": _b64(hashlib.sha256(der).digest()),
                "n": _b64(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")),
                "e": _b64(numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big")),
            }
        ]
    }


def cluster_jwks(directory: Path) -> dict[str, Any]:
    """The JWKS of the local cluster started in `directory`."""
    return jwks((directory / "pki" / "sa.pub").read_bytes())


def write_jwks(directory: Path) -> Path:
    """Write the cluster's JWKS beside its kubeconfig (oidc-jwks.json) and return its path."""
    path = directory / "oidc-jwks.json"
    path.write_text(json.dumps(cluster_jwks(directory), indent=2))
    return path
