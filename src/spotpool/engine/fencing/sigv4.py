"""Check an S3 request's AWS Signature Version 4 (header form), as S3 does: what the fencing S3
proxy asks of every request of a run before it signs the request again with the real keys.

The canonical request is rebuilt from what arrived: the method, the path as sent (S3 does not
encode it twice), the query sorted and encoded, the headers SignedHeaders names (values
trimmed, inner spaces collapsed) and the payload hash the client put in X-Amz-Content-Sha256
(a digest, UNSIGNED-PAYLOAD, or a STREAMING-… seed whose chunks follow). The key is the run's
secret; the date of the scope must be X-Amz-Date's, within 15 minutes of now.
"""

import hashlib
import hmac
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from urllib.parse import parse_qsl, quote, unquote

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW = 900.0  # seconds, as S3 allows
_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=(?P<id>[^/\s]+)/(?P<date>\d{8})/(?P<region>[^/\s]+)/"
    r"(?P<service>[^/\s]+)/aws4_request,\s*SignedHeaders=(?P<headers>[a-z0-9;._-]+),\s*"
    r"Signature=(?P<signature>[0-9a-f]{64})$"
)
_SPACES = re.compile(r"\s+")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def _encode(text: str) -> str:
    return quote(text, safe="-_.~")


def canonical_query(query: str) -> str:
    pairs = parse_qsl(query, keep_blank_values=True)
    return "&".join(f"{_encode(k)}={_encode(v)}" for k, v in sorted(pairs))


def problem(
    method: str,
    path: str,
    query: str,
    headers: Mapping[str, str],
    secret: str | None,
    now: float | None = None,
) -> str | None:
    """Why the request (`headers` keyed in lower case) is not signed with `secret`, or None
    when it is. `secret` None: the key id is not one of a run still going."""
    match = _AUTHORIZATION.match((headers.get("authorization") or "").strip())
    if match is None:
        return "not signed with AWS4-HMAC-SHA256 (header form)"
    if secret is None:
        return "the Pulumi run that sent this request is over (its operation ended)"
    names = match["headers"].split(";")
    if "host" not in names or "x-amz-date" not in names:
        return "the signature does not cover Host and X-Amz-Date"
    payload = headers.get("x-amz-content-sha256") or ""
    if not payload:
        return "no X-Amz-Content-Sha256"
    stamp = headers.get("x-amz-date") or ""
    try:
        signed_at = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "no valid X-Amz-Date"
    if abs((time.time() if now is None else now) - signed_at.timestamp()) > MAX_SKEW:
        return "the signature's date is more than 15 minutes from now"
    if stamp[:8] != match["date"]:
        return "the credential scope's date is not X-Amz-Date's"
    canonical_headers = "".join(
        f"{name}:{_SPACES.sub(' ', (headers.get(name) or '').strip())}\n" for name in names
    )
    scope = f"{match['date']}/{match['region']}/{match['service']}/aws4_request"
    key = _hmac(("AWS4" + secret).encode(), match["date"])
    for part in (match["region"], match["service"], "aws4_request"):
        key = _hmac(key, part)
    # The path as sent; some clients sign it encoded once from its decoded form.
    for canonical_path in dict.fromkeys([path or "/", quote(unquote(path or "/"), safe="/-_.~")]):
        canonical = "\n".join(
            [method, canonical_path, canonical_query(query), canonical_headers,
             match["headers"], payload]
        )  # fmt: skip
        string_to_sign = "\n".join(
            [ALGORITHM, stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        expected = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
        if hmac.compare_digest(expected, match["signature"]):
            return None
    return "the signature does not match"


def payload_problem(headers: Mapping[str, str], raw: bytes) -> str | None:
    """Why the body is not the one the signature covers (`X-Amz-Content-Sha256`, a digest, is
    in the signed canonical request), or None. UNSIGNED-PAYLOAD and the STREAMING-… forms
    name no digest of the whole body (a run's CLI sends a digest over plain HTTP)."""
    claimed = (headers.get("x-amz-content-sha256") or "").lower()
    if not _DIGEST.match(claimed):
        return None
    if hmac.compare_digest(hashlib.sha256(raw).hexdigest(), claimed):
        return None
    return "the body's SHA-256 is not the X-Amz-Content-Sha256 the request was signed with"
