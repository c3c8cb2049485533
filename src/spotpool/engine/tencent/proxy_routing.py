"""Who and where an API call to the local API proxy names: the run token its Proxy-Authorization
carries, the SecretId it is signed with, the rate bucket it draws from, and the upstream it
may go to (`<service>.tencentcloudapi.com` only, with the dot boundary)."""

import base64
import binascii
import re
from collections.abc import Mapping
from email.message import Message
from urllib.parse import SplitResult, urlsplit

API_DOMAIN = "tencentcloudapi.com"
# `<service>.tencentcloudapi.com` (any depth of labels), with the dot boundary.
_API_HOST = re.compile(r"^(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+tencentcloudapi\.com$")
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")


def run_token(headers: Mapping[str, str] | Message) -> str | None:
    """The run token in a request's Proxy-Authorization (Basic, the token as the password),
    or None when the request carries none (an unfenced run)."""
    value = headers.get("Proxy-Authorization") or ""
    scheme, _, encoded = value.partition(" ")
    if scheme.lower() != "basic" or not encoded:
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""  # malformed: an unknown token, refused
    return decoded.partition(":")[2]


def signing_id(headers: Mapping[str, str] | Message) -> str:
    """The SecretId a call is signed with (a public key id), or "" when unsigned."""
    found = _CREDENTIAL.search(headers.get("Authorization") or "")
    return found.group(1) if found else ""


def bucket_key(
    headers: Mapping[str, str] | Message, owner: str | None = None
) -> tuple[str, str, str] | None:
    """(owner, region, action) of an API 3.0 call, as the operator's buckets are keyed: the
    owner is the account of renewed temporary keys, else the SecretId; None for anything else
    (no token taken)."""
    action = headers.get("X-TC-Action")
    if not action:
        return None
    return (owner or signing_id(headers), headers.get("X-TC-Region") or "", action)


def api_host(host: str) -> str | None:
    """The API host a request names (`Host`, maybe with :80/:443), or None when it is not
    `<service>.tencentcloudapi.com` exactly."""
    name, sep, port = host.strip().lower().partition(":")
    if sep and port not in ("80", "443"):
        return None
    return name if _API_HOST.match(name) else None


def destination_of(endpoint: str | None, path: str, host: str) -> tuple[str, str, str] | None:
    """(scheme, host, request target) to send a request to; None when it names any host but
    the API's (`Host`, signed, and the request target's must agree)."""
    name = api_host(host)
    parts = urlsplit(path)
    if name is None or (parts.netloc and api_host(parts.netloc) != name):
        return None  # a userinfo@, another host or port: never sent anywhere
    if endpoint:  # the emulator is a proxy too: it gets the absolute URI as we did
        upstream = urlsplit(endpoint)
        return upstream.scheme or "http", upstream.netloc, f"http://{name}/{_target(parts)}"
    return "https", name, "/" + _target(parts)  # the real cloud: TLS, always


def _target(parts: "SplitResult") -> str:
    """The request target's path and query, without its leading slash."""
    return (parts.path or "/").lstrip("/") + (f"?{parts.query}" if parts.query else "")
