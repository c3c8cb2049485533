"""A rate-limiting forward proxy on 127.0.0.1 for the tencentcloud provider inside Pulumi runs.

Every RunInstances and refresh Describe of a run comes from the provider, not from the
operator's SDK calls: the runs are told to speak plain HTTP through this proxy
(`TENCENTCLOUD_PROTOCOL=HTTP`, `HTTP_PROXY`), which takes a token from the same
(SecretId, region, action) bucket as the operator's own calls (ratelimit.BUCKETS) before it
forwards each request, so one account's rate holds whatever runs at once.

The request is forwarded untouched: TC3-HMAC-SHA256 signs the Host header, the content type
and the body, and the proxy keeps all three (the Host names the API, not the proxy). It reads
only the action (X-TC-Action), the region (X-TC-Region) and the SecretId (Authorization's
Credential=, a public key id); it never logs a request. Upstream is the emulator (which is
itself the runs' proxy in the local world) or, against the real cloud, https://<Host>: the
plain-HTTP leg never leaves the machine.

It is also the fence of the runs' cloud calls. A fenced run (one started under a shard's
operation) is admitted with a token of its own in its proxy URL (`admit`; Go sends it as
Proxy-Authorization), and every request it sends is forwarded only if the run's fence still
passes, checked on arrival and again right before the send (after any wait for a token): a CLI
frozen with its replica and thawed after another replica took the shard over has its queued
RunInstances and TerminateInstances refused, not forwarded. The refusal is a Tencent API error
that the provider does not retry (`FENCED_CODE`), so the run fails at once instead of retrying
into a storm. A run whose admission ended (the operation is over) is refused too.

Temporary credentials are re-signed here. A call signed with a temporary SecretId that the
process's credential cache issued (identities.py) is signed again, right before the send, with
that identity's live credentials (renewed at two thirds of their life): a run that outlives
the keys it started with never fails for it. Its bucket is the identity's account (an assumed
role's), not the SecretId, which changes at every renewal.
"""

import base64
import binascii
import http.client
import json
import logging
import os
import re
import secrets
import select
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from spotpool.engine.tencent import tc3
from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.identities import CREDENTIALS
from spotpool.engine.tencent.ratelimit import BUCKETS, Buckets
from spotpool.engine.tencent.sts import StsError

API_DOMAIN = "tencentcloudapi.com"
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
UPSTREAM_TIMEOUT = 120.0
# Not in the provider's retryable codes (common.go retryableErrorCode, matched whole or by the
# family before the dot): the run fails on the first refusal.
FENCED_CODE = "OperationDenied.WriterFenced"
log = logging.getLogger(__name__)
Check = Callable[[], None]  # raises when the run's writer may no longer write


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


class _Upstreams:
    """One handler thread's connections, reused across its client's keep-alive requests."""

    def __init__(self, endpoint: str | None) -> None:
        self.endpoint = endpoint
        self._open: dict[tuple[str, str], http.client.HTTPConnection] = {}

    def target(self, path: str, host: str) -> tuple[str, str, str]:
        """(scheme, host, request target) to send the request to."""
        if self.endpoint:  # the emulator is a proxy too: it gets the absolute URI as we did
            upstream = urlsplit(self.endpoint)
            return upstream.scheme or "http", upstream.netloc, path
        parts = urlsplit(path)
        host = parts.netloc or host
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        # The API over TLS, always; anything else (not ours to upgrade) as it came.
        scheme = "https" if host.split(":")[0].endswith(API_DOMAIN) else "http"
        return scheme, host, target

    def connection(self, scheme: str, host: str) -> http.client.HTTPConnection:
        found = self._open.get((scheme, host))
        if found is None:
            if scheme == "https":
                found = http.client.HTTPSConnection(
                    host, timeout=UPSTREAM_TIMEOUT, context=ssl.create_default_context()
                )
            else:
                found = http.client.HTTPConnection(host, timeout=UPSTREAM_TIMEOUT)
            self._open[(scheme, host)] = found
        return found

    def drop(self, scheme: str, host: str) -> None:
        found = self._open.pop((scheme, host), None)
        if found is not None:
            found.close()

    def close(self) -> None:
        for connection in self._open.values():
            connection.close()
        self._open.clear()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the provider's Go client expects
    server: "_Server"

    def setup(self) -> None:
        super().setup()
        self.upstreams = _Upstreams(self.server.endpoint)

    def finish(self) -> None:
        super().finish()
        self.upstreams.close()

    def do_POST(self) -> None:
        body = self._body()
        token = run_token(self.headers)
        if self._refused(token):
            return
        live = _live_keys(lambda: CREDENTIALS.current_for(signing_id(self.headers)))
        key = bucket_key(self.headers, live.bucket_owner() if live else None)
        if key is not None:  # wait its turn, across every run and the operator's own calls
            wait = self.server.buckets.bucket(*key).reserve()
            if wait > 0:
                time.sleep(wait)
                if self._client_gone():
                    return  # its run was killed meanwhile: a dead run's call must not land
                if self._refused(token):  # right before the send: the wait may be long
                    return
        scheme, host, target = self.upstreams.target(self.path, self.headers.get("Host") or "")
        replaced = self._resigned(body, live)
        headers = [
            (k, v)
            for k, v in self.headers.items()
            if k.lower() not in _HOP_BY_HOP
            and k.lower() != "content-length"
            and k.lower() not in replaced
        ] + [(k, v) for k, v in replaced.items()]
        for attempt in (1, 2):  # a kept-alive upstream connection may have been closed
            connection = self.upstreams.connection(scheme, host)
            try:
                connection.putrequest(
                    self.command, target, skip_host=True, skip_accept_encoding=True
                )
                for name, value in headers:
                    connection.putheader(name, value)
                connection.putheader("Content-Length", str(len(body)))
                connection.endheaders(body)
                reply = connection.getresponse()
                data = reply.read()
                break
            except (OSError, http.client.HTTPException) as error:
                self.upstreams.drop(scheme, host)
                if attempt == 2:
                    self.send_error(502, f"upstream {host}: {type(error).__name__}")
                    return
        self.send_response(reply.status, reply.reason)
        for name, value in reply.getheaders():
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_DELETE = do_HEAD = do_POST

    def _resigned(self, body: bytes, live: Credentials | None) -> dict[str, str]:
        """Headers that sign the call with its identity's live temporary keys (renewed right
        now if due); none for a call signed with permanent keys."""
        if live is None:
            return {}
        # The wait for a token may have outlasted a renewal point.
        live = _live_keys(live.current)
        if live is None:
            return {}
        query = urlsplit(self.path).query
        headers = {k: v for k, v in self.headers.items()}
        replaced = tc3.resign(self.command, query, headers, body, live, time.time()) or {}
        return {k.lower(): v for k, v in replaced.items()}

    def _refused(self, token: str | None) -> bool:
        """Answer the run's call with the fence's refusal if its writer lost the right to
        write (or its admission is over); True when refused."""
        if token is None:
            return False  # not a fenced run (a run by hand, a preview)
        why = self.server.fence_failure(token)
        if why is None:
            return False
        self.server.refused += 1
        log.warning("cloud call %s refused: %s", self.headers.get("X-TC-Action") or "?", why)
        reply = {
            "Response": {
                "Error": {"Code": FENCED_CODE, "Message": f"spotpool: {why}; not sent"},
                "RequestId": str(uuid.uuid4()),
            }
        }
        data = json.dumps(reply).encode()
        self.send_response(200)  # an API error, as the cloud answers one (not a retried 5xx)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        return True

    def _client_gone(self) -> bool:
        """The run's connection closed while its call waited (the run was killed)."""
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return bool(self.connection.recv(1, socket.MSG_PEEK) == b"")
        except OSError:
            return True

    def _body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():  # trailers, up to the blank line
                pass
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the emulator and the operator's metrics say what was called."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, endpoint: str | None, buckets: Buckets) -> None:
        self.endpoint = endpoint
        self.buckets = buckets
        self.runs: dict[str, Check | None] = {}  # admitted runs: token -> their fence
        self.refused = 0  # calls refused by the fence, for tests and logs
        super().__init__(("127.0.0.1", 0), _Handler)

    def fence_failure(self, token: str) -> str | None:
        """Why the run of `token` may not send now, or None when it may."""
        if token not in self.runs:
            return "the Pulumi run that sent this call is over (its operation ended)"
        check = self.runs[token]
        if check is None:
            return None
        try:
            check()
        except Exception as error:  # the fence's own refusal (NotServed), whatever its type
            return str(error) or type(error).__name__
        return None


class ApiProxy:
    """The proxy, serving on a thread of its own until the process ends (or `close`)."""

    def __init__(self, endpoint: str | None, buckets: Buckets = BUCKETS) -> None:
        self._server = _Server(endpoint, buckets)
        host, port = self._server.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        thread = threading.Thread(
            target=self._server.serve_forever, name="spotpool-api-proxy", daemon=True
        )
        thread.start()

    def env(self) -> dict[str, str]:
        """What a Pulumi run needs to send the provider's calls through the proxy."""
        return {
            "TENCENTCLOUD_PROTOCOL": "HTTP",
            "HTTP_PROXY": self.url,
            "http_proxy": self.url,
            # A NO_PROXY naming the API would send plain HTTP straight to the cloud.
            "NO_PROXY": _without_api(os.environ.get("NO_PROXY", "")),
            "no_proxy": _without_api(os.environ.get("no_proxy", "")),
        }

    @contextmanager
    def admit(self, check: Check | None) -> Iterator[dict[str, str]]:
        """Admit one Pulumi run: yields its proxy variables, with a token of its own, and
        forwards its calls while `check` passes, until the block ends."""
        token = secrets.token_urlsafe(18)
        self._server.runs[token] = check
        url = self.url.replace("http://", f"http://run:{token}@", 1)
        try:
            yield {"HTTP_PROXY": url, "http_proxy": url}
        finally:
            self._server.runs.pop(token, None)

    @property
    def refused(self) -> int:
        """How many calls the fence refused so far."""
        return self._server.refused

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _live_keys(obtain: Callable[[], Credentials | None]) -> Credentials | None:
    """The live keys to sign with; None (the call goes as it came, and the cloud says what is
    wrong with it) when STS refuses the renewal: the operator's own calls report that."""
    try:
        return obtain()
    except StsError as error:
        log.warning("a run's call goes unrenewed: STS answered %s", error.code)
        return None


def _without_api(no_proxy: str) -> str:
    return ",".join(
        entry for entry in no_proxy.split(",") if entry.strip() and API_DOMAIN not in entry
    )


_proxies: dict[str | None, ApiProxy] = {}
_proxies_guard = threading.Lock()


def proxy_at(url: str | None) -> ApiProxy | None:
    """This process's proxy serving at `url` (a run's HTTP_PROXY), if any."""
    with _proxies_guard:
        return next((p for p in _proxies.values() if url and p.url == url), None)


def proxy_for(endpoint: str | None) -> ApiProxy:
    """This process's proxy to `endpoint` (None: the real cloud), started on first use."""
    with _proxies_guard:
        found = _proxies.get(endpoint)
        if found is None:
            found = _proxies[endpoint] = ApiProxy(endpoint)
        return found
