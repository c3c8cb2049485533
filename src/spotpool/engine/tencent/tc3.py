"""Check and sign API 3.0 requests (TC3-HMAC-SHA256): the API proxy verifies that a Pulumi
run's call is signed with the placeholder keys issued to that run (`verify`), then signs it
again with the real keys (`resign`), which the run never sees.

The provider's SDK signs the headers its Authorization names (content-type;host;x-tc-action:
the toolchain builds its SDK with the action signed), the body's SHA-256 and, for GET, the
query; the token travels unsigned in X-TC-Token. The new signature
covers the same, with a fresh X-TC-Timestamp (a call that waited for a rate-limit token would
otherwise also risk the API's five-minute signature window).
"""

import hashlib
import hmac
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from spotpool.engine.tencent.credentials import Credentials

ALGORITHM = "TC3-HMAC-SHA256"
_AUTHORIZATION = re.compile(
    r"^TC3-HMAC-SHA256\s+Credential=(?P<id>[^/\s]+)/(?P<date>\d{4}-\d{2}-\d{2})/"
    r"(?P<service>[a-z0-9]+)/tc3_request,\s*SignedHeaders=(?P<headers>[a-z0-9;-]+),"
    r"\s*Signature=(?P<signature>[0-9a-f]{64})$"
)
MAX_SKEW = 300.0  # seconds between a signature's timestamp and now, as the API allows


def signed_with(authorization: str) -> tuple[str, list[str]] | None:
    """(service, signed header names) of a TC3 Authorization, or None if it is not one."""
    match = _AUTHORIZATION.match(authorization.strip())
    return (match["service"], match["headers"].split(";")) if match else None


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def signature(
    method: str,
    query: str,
    headers: Mapping[str, str],
    body: bytes,
    secret_key: str,
    scope: tuple[str, str, list[str]],
    timestamp: int,
    lower: bool = False,
) -> str:
    """The TC3-HMAC-SHA256 signature of a request (`headers` keyed in lower case; `scope`:
    service, date, signed header names). The API lowercases X-TC-Action's value in the
    canonical form; `lower`: every value, as some SDKs sign."""
    service, date, names = scope
    canonical_headers = ""
    for name in names:
        value = headers.get(name, "").strip()
        canonical_headers += (
            f"{name}:{value.lower() if lower or name == 'x-tc-action' else value}\n"
        )
    if headers.get("x-tc-content-sha256") == "UNSIGNED-PAYLOAD":
        payload = hashlib.sha256(b"UNSIGNED-PAYLOAD").hexdigest()
    else:
        payload = hashlib.sha256(body if method != "GET" else b"").hexdigest()
    canonical = "\n".join(
        [method, "/", query if method == "GET" else "", canonical_headers, ";".join(names), payload]
    )
    string_to_sign = "\n".join(
        [
            ALGORITHM,
            str(timestamp),
            f"{date}/{service}/tc3_request",
            hashlib.sha256(canonical.encode()).hexdigest(),
        ]
    )
    key = _hmac(_hmac(_hmac(("TC3" + secret_key).encode(), date), service), "tc3_request")
    return hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()


def verify(
    method: str,
    query: str,
    headers: Mapping[str, str],
    body: bytes,
    keys: Callable[[str], str | None],
    now: float,
) -> str | None:
    """Why the request is not signed by keys `keys` knows (SecretId -> SecretKey), or None
    when it is: the signature over its method, query, signed headers and body, with a
    timestamp within five minutes of `now` and the date of its scope."""
    lower = {k.lower(): v for k, v in headers.items()}
    match = _AUTHORIZATION.match(lower.get("authorization", "").strip())
    if match is None:
        return "not signed with TC3-HMAC-SHA256"
    names = match["headers"].split(";")
    if "host" not in names or "content-type" not in names:
        return "the signature does not cover the Host and Content-Type headers"
    if "x-tc-action" not in names:
        # Unsigned, the action of a seen request could be swapped: the same body, another call.
        return "the signature does not cover the X-TC-Action header"
    secret_key = keys(match["id"])
    if secret_key is None:
        return "signed with a SecretId this proxy did not issue (or one that expired)"
    try:
        timestamp = int(lower.get("x-tc-timestamp", ""))
    except ValueError:
        return "no X-TC-Timestamp"
    if abs(now - timestamp) > MAX_SKEW:
        return "the signature's timestamp is more than five minutes from now"
    if datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d") != match["date"]:
        return "the credential scope's date is not the timestamp's"
    scope = (match["service"], match["date"], names)
    for every in (False, True):
        expected = signature(method, query, lower, body, secret_key, scope, timestamp, every)
        if hmac.compare_digest(expected, match["signature"]):
            return None
    return "the signature does not match"


def resign(
    method: str,
    query: str,
    headers: Mapping[str, str],
    body: bytes,
    credentials: Credentials,
    now: float,
) -> dict[str, str] | None:
    """The headers to replace (Authorization, X-TC-Timestamp, X-TC-Token) so the request is
    signed by `credentials`; None when the request is not TC3-signed (left as it is)."""
    lower = {k.lower(): v for k, v in headers.items()}
    found = signed_with(lower.get("authorization", ""))
    if found is None:
        return None
    service, names = found
    timestamp = int(now)
    date = datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d")
    lower["x-tc-timestamp"] = str(timestamp)  # should the signature cover it
    secret_key = credentials.secret_key.get_secret_value()
    signed = signature(method, query, lower, body, secret_key, (service, date, names), timestamp)
    scope = f"{date}/{service}/tc3_request"
    secret_id = credentials.secret_id.get_secret_value()
    replaced = {
        "Authorization": f"{ALGORITHM} Credential={secret_id}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signed}",
        "X-TC-Timestamp": str(timestamp),
    }
    if credentials.token is not None:
        replaced["X-TC-Token"] = credentials.token.get_secret_value()
    return replaced
