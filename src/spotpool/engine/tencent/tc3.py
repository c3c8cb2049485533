"""Sign an API 3.0 request again (TC3-HMAC-SHA256) with other keys: what the API proxy does to
a Pulumi run's call signed with temporary keys that were renewed since the run started.

The provider's SDK signs the headers its Authorization names (content-type;host), the body's
SHA-256 and, for GET, the query; the token travels unsigned in X-TC-Token. The new signature
covers the same, with a fresh X-TC-Timestamp (a call that waited for a rate-limit token would
otherwise also risk the API's five-minute signature window).
"""

import hashlib
import hmac
import re
from collections.abc import Mapping
from datetime import UTC, datetime

from spotpool.engine.tencent.credentials import Credentials

ALGORITHM = "TC3-HMAC-SHA256"
_AUTHORIZATION = re.compile(
    r"^TC3-HMAC-SHA256\s+Credential=[^/\s]+/\d{4}-\d{2}-\d{2}/(?P<service>[a-z0-9]+)/"
    r"tc3_request,\s*SignedHeaders=(?P<headers>[a-z0-9;-]+),\s*Signature=[0-9a-f]{64}$"
)


def signed_with(authorization: str) -> tuple[str, list[str]] | None:
    """(service, signed header names) of a TC3 Authorization, or None if it is not one."""
    match = _AUTHORIZATION.match(authorization.strip())
    return (match["service"], match["headers"].split(";")) if match else None


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


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
    canonical_headers = "".join(f"{n}:{lower.get(n, '').strip()}\n" for n in names)
    if lower.get("x-tc-content-sha256") == "UNSIGNED-PAYLOAD":
        payload = hashlib.sha256(b"UNSIGNED-PAYLOAD").hexdigest()
    else:
        payload = hashlib.sha256(body if method != "GET" else b"").hexdigest()
    canonical = "\n".join(
        [method, "/", query if method == "GET" else "", canonical_headers, ";".join(names), payload]
    )
    scope = f"{date}/{service}/tc3_request"
    string_to_sign = "\n".join(
        [ALGORITHM, str(timestamp), scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    secret_key = credentials.secret_key.get_secret_value()
    key = _hmac(_hmac(_hmac(("TC3" + secret_key).encode(), date), service), "tc3_request")
    signature = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    secret_id = credentials.secret_id.get_secret_value()
    replaced = {
        "Authorization": f"{ALGORITHM} Credential={secret_id}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}",
        "X-TC-Timestamp": str(timestamp),
    }
    if credentials.token is not None:
        replaced["X-TC-Token"] = credentials.token.get_secret_value()
    return replaced
