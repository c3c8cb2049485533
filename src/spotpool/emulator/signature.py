"""TC3-HMAC-SHA256 verification, as Tencent Cloud API 3.0 does it.

The canonical request is rebuilt from what arrived (method, path, query, the headers named in
SignedHeaders, the body's SHA-256) and signed again with the configured key; the service name
comes from the credential scope, so one server answers every service.
"""

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from spotpool.emulator.errors import ApiError

ALGORITHM = "TC3-HMAC-SHA256"
MAX_CLOCK_SKEW_SECONDS = 300  # the real API refuses signatures older than five minutes

_AUTHORIZATION = re.compile(
    r"^TC3-HMAC-SHA256\s+Credential=(?P<secret_id>[^/\s]+)/(?P<date>\d{4}-\d{2}-\d{2})/"
    r"(?P<service>[a-z0-9]+)/tc3_request,\s*SignedHeaders=(?P<headers>[a-z0-9;-]+),\s*"
    r"Signature=(?P<signature>[0-9a-f]{64})$"
)
# Only the credential scope's service, from a header that may be wrong in every other way.
_SCOPE_SERVICE = re.compile(r"Credential=[^/\s]+/[^/\s]+/(?P<service>[a-z0-9]+)/tc3_request")


@dataclass(frozen=True)
class SignedRequest:
    """What a request carries that the signature covers."""

    method: str
    path: str
    query: str
    headers: Mapping[str, str]  # case-insensitive lookups are the caller's job: keys lowercased
    body: bytes


@dataclass(frozen=True)
class Caller:
    secret_id: str
    service: str


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def signature(secret_key: str, date: str, service: str, string_to_sign: str) -> str:
    secret_date = _hmac(("TC3" + secret_key).encode(), date)
    secret_service = _hmac(secret_date, service)
    secret_signing = _hmac(secret_service, "tc3_request")
    return hmac.new(secret_signing, string_to_sign.encode(), hashlib.sha256).hexdigest()


def _canonical_request(request: SignedRequest, signed_headers: list[str], lower: bool) -> str:
    lines = []
    for name in signed_headers:
        value = request.headers.get(name, "").strip()
        # The API lowercases X-TC-Action in the canonical form; older SDKs sign values as sent.
        if lower or name == "x-tc-action":
            value = value.lower()
        lines.append(f"{name}:{value}\n")
    if request.headers.get("x-tc-content-sha256") == "UNSIGNED-PAYLOAD":
        payload_hash = hashlib.sha256(b"UNSIGNED-PAYLOAD").hexdigest()
    else:
        payload_hash = hashlib.sha256(request.body if request.method != "GET" else b"").hexdigest()
    query = request.query if request.method == "GET" else ""
    return "\n".join(
        [
            request.method,
            request.path,
            query,
            "".join(lines),
            ";".join(signed_headers),
            payload_hash,
        ]
    )


def scope_service(authorization: str) -> str | None:
    """The service an Authorization header's credential scope names, checking nothing else.

    For the request log: a request whose signature fails still says which service it meant.
    """
    match = _SCOPE_SERVICE.search(authorization)
    return match["service"] if match else None


def verify(request: SignedRequest, keys: Mapping[str, str], now: float) -> Caller:
    """Return who signed `request`, or raise the AuthFailure the real API would answer."""
    authorization = request.headers.get("authorization", "")
    if not authorization:
        raise ApiError("AuthFailure.SignatureFailure", "The request has no Authorization header.")
    match = _AUTHORIZATION.match(authorization.strip())
    if match is None:
        raise ApiError(
            "AuthFailure.SignatureFailure",
            "The Authorization header is not a TC3-HMAC-SHA256 signature.",
        )
    secret_key = keys.get(match["secret_id"])
    if secret_key is None:
        raise ApiError("AuthFailure.SecretIdNotFound", "The SecretId is not found.")
    timestamp_text = request.headers.get("x-tc-timestamp", "")
    if not timestamp_text.isdigit():
        raise ApiError("MissingParameter", "The request is missing the X-TC-Timestamp header.")
    timestamp = int(timestamp_text)
    if abs(now - timestamp) > MAX_CLOCK_SKEW_SECONDS:
        raise ApiError(
            "AuthFailure.SignatureExpire",
            f"The signature expired: X-TC-Timestamp {timestamp} is more than "
            f"{MAX_CLOCK_SKEW_SECONDS} s from the server time {int(now)}.",
        )
    date = datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d")
    if match["date"] != date:
        raise ApiError(
            "AuthFailure.SignatureFailure",
            f"The credential scope date {match['date']} does not match X-TC-Timestamp ({date}).",
        )
    signed_headers = match["headers"].split(";")
    if "host" not in signed_headers or "content-type" not in signed_headers:
        raise ApiError(
            "AuthFailure.SignatureFailure", "SignedHeaders must include content-type and host."
        )
    scope = f"{match['date']}/{match['service']}/tc3_request"
    for lower in (False, True):
        digest = hashlib.sha256(
            _canonical_request(request, signed_headers, lower).encode()
        ).hexdigest()
        string_to_sign = "\n".join([ALGORITHM, timestamp_text, scope, digest])
        expected = signature(secret_key, match["date"], match["service"], string_to_sign)
        if hmac.compare_digest(expected, match["signature"]):
            return Caller(secret_id=match["secret_id"], service=match["service"])
    raise ApiError(
        "AuthFailure.SignatureFailure",
        "The provided credentials could not be validated. Please check your signature is correct.",
    )
