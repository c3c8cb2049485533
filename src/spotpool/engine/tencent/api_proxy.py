"""A rate-limiting forward proxy on 127.0.0.1 for the tencentcloud provider inside Pulumi runs.

Every RunInstances and refresh Describe of a run comes from the provider, not from the
operator's SDK calls: the runs are told to speak plain HTTP through this proxy
(`TENCENTCLOUD_PROTOCOL=HTTP`, `HTTP_PROXY`), which takes a token from the same
(SecretId, region, action) bucket as the operator's own calls (ratelimit.BUCKETS) before it
forwards each request, so one account's rate holds whatever runs at once.

It trusts no caller. A run never holds the real keys: each run is issued placeholder keys of
its own (`issue`, dropped when the run ends), and a call is forwarded only when it is signed
(TC3-HMAC-SHA256, within five minutes) with a placeholder key pair issued to a run still
going; the proxy then signs it again with the real keys (tc3.py). Any other process that can
reach the port (in the pod, on the host) gets 'AuthFailure.SignatureFailure' and nothing
leaves. The Host the signature covers must be `<service>.tencentcloudapi.com` (a dot
boundary, no userinfo, no other port), the request target's host the same; upstream is the
configured endpoint (the emulator, itself the runs' proxy in the local world) or, against the
real cloud, https://<Host>:443, always TLS: the plain-HTTP leg never leaves the machine.
A request is read within bounds before anything in it is believed (proxy_requests.py):
its body capped (`MAX_BODY`, chunk sizes checked), a deadline for the whole request
(`REQUEST_DEADLINE`) besides the wait for each byte (`HANDLER_TIMEOUT`), at most
`MAX_CONNECTIONS` at once, and the headers it checks present once (`SINGLE_HEADERS`: two
`Authorization` headers are refused). The proxy never logs a request.

It is also the fence of the runs' cloud calls. A fenced run (one started under a shard's
operation) is admitted with a token of its own in its proxy URL (`admit`; Go sends it as
Proxy-Authorization), and every request it sends is forwarded only if the run's fence still
passes, checked on arrival and again right before the send (after any wait for a token): a CLI
frozen with its replica and thawed after another replica took the shard over has its queued
RunInstances and TerminateInstances refused, not forwarded. The refusal is a Tencent API error
that the provider does not retry (`FENCED_CODE`), so the run fails at once instead of retrying
into a storm. A run whose admission ended (the operation is over) is refused too.

Its calls are safe to lose and to repeat (write_safety.py, upstream.py): a RunInstances gets a
`ClientToken` where the provider sent none and is written down in the run's create journal
before it leaves; a create is sent again only with its token, any other write only when the
cloud takes the repeat as the same or it provably never left; a DescribeInstances by id that
misses an instance this process launched is asked again until the listing shows it
(recent_writes.py), and one it terminated a moment ago is not shown as running.

Temporary credentials are renewed here too. A run whose real keys are temporary ones the
process's credential cache issued (identities.py) is signed, right before each send, with
that identity's live credentials (renewed at two thirds of their life): a run that outlives
the keys it started with never fails for it. Its bucket is the identity's account (an assumed
role's), else the real SecretId — never the run's placeholder.
"""

import dataclasses
import json
import logging
import os
import secrets
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from urllib.parse import urlsplit

from pydantic import SecretStr

from spotpool.engine.tencent import tc3
from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.identities import CREDENTIALS, Revoked
from spotpool.engine.tencent.proxy_requests import (
    BadRequest,
    BoundedHandler,
    CappedServer,
    duplicated,
)
from spotpool.engine.tencent.proxy_routing import (
    API_DOMAIN,
    bucket_key,
    destination_of,
    run_token,
    signing_id,
)
from spotpool.engine.tencent.ratelimit import BUCKETS, Buckets
from spotpool.engine.tencent.recent_writes import RECENT
from spotpool.engine.tencent.sts import StsError
from spotpool.engine.tencent.upstream import Lost, Upstreams
from spotpool.engine.tencent.write_safety import (
    STACK_VARIABLE,
    TOO_MANY_CODE,
    CreateJournal,
    CreateRecord,
    Kind,
    OutstandingCreates,
    create_record,
    created_ids,
    journal_of,
    kind_of,
    repeat_settled,
    terminated_ids,
    with_client_token,
)

MAX_BODY = 8 * 1024 * 1024  # bytes of a request body (RunInstances with user data: < 100 KiB)
HANDLER_TIMEOUT = 120.0  # seconds a client may stall mid-request (or idle between requests)
REQUEST_DEADLINE = 60.0  # seconds from a request's first byte to its last
MAX_CONNECTIONS = 512  # open at once: the runs in flight, 4 x CPUs resource operations each
# What the proxy checks and acts on: each present once (verified on one, acted on by another).
SINGLE_HEADERS = ("Authorization", "Host", "X-TC-Action", "X-TC-Region", "X-TC-Timestamp",
                  "X-TC-Token", "Content-Type", "Proxy-Authorization")  # fmt: skip
PLACEHOLDER_PREFIX = "SPOTPOOLRUN"
REFUSED_CODE = "AuthFailure.SignatureFailure"  # not retried by the provider either
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
# Not in the provider's retryable codes (common.go retryableErrorCode, matched whole or by the
# family before the dot): the run fails on the first refusal.
FENCED_CODE = "OperationDenied.WriterFenced"
log = logging.getLogger(__name__)
Check = Callable[[], None]  # raises when the run's writer may no longer write


@dataclasses.dataclass(frozen=True)
class _Issued:
    """A run's placeholder keys: the key it signs with, its real keys' source, what its
    creates' tokens derive from (`run_key`) and where they are written down."""

    secret_key: str
    live: Callable[[], Credentials]
    run_key: str = ""
    journal: CreateJournal | None = None


class _Handler(BoundedHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the provider's Go client expects
    server: "_Server"
    timeout = HANDLER_TIMEOUT  # the socket's: a stalled client is cut off
    request_deadline = REQUEST_DEADLINE
    max_body = MAX_BODY

    def setup(self) -> None:
        super().setup()
        self.upstreams = Upstreams()

    def finish(self) -> None:
        super().finish()
        self.upstreams.close()

    def do_POST(self) -> None:
        try:
            body = self.read_body()
        except BadRequest as bad:
            self.close_connection = True  # the rest of the request is not read
            self.send_error(bad.status, bad.reason)
            return
        except OSError:
            self.close_connection = True
            self.send_error(400, "malformed request body")
            return
        if (twice := duplicated(self.headers, SINGLE_HEADERS)) is not None:
            self.server.refused += 1
            self._deny(f"the request has more than one {twice} header")
            return
        destination = destination_of(
            self.server.endpoint, self.path, self.headers.get("Host") or ""
        )
        if destination is None:
            self.server.refused += 1
            self._deny("the request names a host other than <service>.tencentcloudapi.com")
            return
        query = urlsplit(self.path).query
        issued = self.server.keys.get(signing_id(self.headers))
        sent = dict(self.headers.items())
        now = time.time()
        problem = tc3.verify(self.command, query, sent, body, self.server.secret_key_of, now)
        if problem is not None or issued is None:
            self.server.refused += 1
            self._deny(problem or "signed with keys this proxy did not issue")
            return
        token = run_token(self.headers)
        if self._refused(token):
            return
        live = _live_keys(issued.live)
        if live is None:
            self._deny("the run's temporary keys could not be renewed (STS refused)")
            return
        key = bucket_key(self.headers, live.bucket_owner())
        if not self._take_turn(key, token):
            return
        action = self.headers.get("X-TC-Action") or ""
        kind = kind_of(action)
        create = None
        if kind is Kind.CREATE:
            body, create = self._recorded_create(body, issued)
            if create is None:
                return  # refused, and said so
        try:
            replaced = self._resigned(body, live)
        except Revoked as revoked:
            self._deny(f"the run's identity was withdrawn ({revoked.code})")
            return
        headers = [
            (k, v)
            for k, v in self.headers.items()
            if k.lower() not in _HOP_BY_HOP
            and k.lower() not in ("content-length", "x-tc-token")
            and k.lower() not in replaced
        ] + [(k, v) for k, v in replaced.items()]

        def again() -> bool:  # before any repeat: the fence and a rate token again
            return not self._client_gone() and self._take_turn(key, token, quiet=True)

        RECENT.terminated(terminated_ids(action, body))  # answered or not: maybe gone
        try:
            reply = self.upstreams.exchange(kind, destination, self.command, headers, body, again)
            if action == "DescribeInstances" and reply.status == 200:
                reply = self.upstreams.caught_up(
                    reply, destination, self.command, headers, body, again
                )
            elif reply.repeated:
                reply = dataclasses.replace(reply, data=repeat_settled(action, reply.data))
        except Lost as lost:
            self.send_error(502, str(lost))
            return
        if create is not None and (ids := created_ids(reply.data)):
            RECENT.launched(ids)
            create.instance_ids = ids
            if issued.journal is not None:
                _quietly(issued.journal.answered, create)
        self.send_response(reply.status, reply.reason)
        for name, value in reply.headers:
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply.data)))
        self.end_headers()
        self.wfile.write(reply.data)

    def _take_turn(
        self, key: tuple[str, str, str] | None, token: str | None, quiet: bool = False
    ) -> bool:
        """Wait for the call's rate token (shared by every run and the operator's own calls),
        then pass the fence again if it waited (the wait may be long) or if `quiet` (a repeat:
        refused without an answer). False when refused or its run was killed meanwhile."""
        limited = key is not None and self.server.limited
        wait = self.server.buckets.bucket(*key).reserve() if limited and key else 0.0
        if wait > 0:
            time.sleep(wait)
            if self._client_gone():
                return False  # its run was killed meanwhile: a dead run's call must not land
        elif not quiet:
            return True  # it passed the fence just now
        if quiet:
            return token is None or self.server.fence_failure(token) is None
        return not self._refused(token)

    def _recorded_create(self, body: bytes, issued: "_Issued") -> tuple[bytes, CreateRecord | None]:
        """The create's body with its ClientToken, written down in the run's journal before
        it is sent; None (and the refusal answered) when the journal refuses it."""
        body, token = with_client_token(body, issued.run_key)
        create = create_record(body, token or "")
        if issued.journal is None or token is None:
            return body, create
        try:
            issued.journal.record(create)
        except OutstandingCreates as too_many:
            self._api_error(TOO_MANY_CODE, f"spotpool: {too_many}; not sent")
            return body, None
        except Exception as error:  # a backend that cannot write: the create is not sent
            log.warning("a create not sent: its record could not be written: %s", error)
            self._api_error("InternalError", "spotpool: the create could not be recorded; not sent")
            return body, None
        return body, create

    do_GET = do_PUT = do_DELETE = do_HEAD = do_POST

    def _resigned(self, body: bytes, live: Credentials) -> dict[str, str]:
        """Headers that sign the call with the run's real keys (temporary ones renewed right
        now if due)."""
        # The wait for a token may have outlasted a renewal point (or a withdrawn grant:
        # Revoked goes up, the call is refused, never signed with the keys held before).
        try:
            live = live.current() or live
        except Revoked:
            raise
        except StsError as error:
            log.warning("a run's call goes unrenewed: STS answered %s", error.code)
        query = urlsplit(self.path).query
        headers = {k: v for k, v in self.headers.items()}
        replaced = tc3.resign(self.command, query, headers, body, live, time.time()) or {}
        return {k.lower(): v for k, v in replaced.items()}

    def _deny(self, why: str) -> None:
        """Answer a call that is not forwarded as the API answers a bad signature."""
        log.warning("a call to the local API proxy refused: %s", why)
        self._api_error(REFUSED_CODE, f"spotpool: {why}; not sent")

    def _api_error(self, code: str, message: str) -> None:
        reply = {
            "Response": {
                "Error": {"Code": code, "Message": message},
                "RequestId": str(uuid.uuid4()),
            }
        }
        data = json.dumps(reply).encode()
        self.send_response(200)  # an API error, as the cloud answers one (not a retried 5xx)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

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
        self._api_error(FENCED_CODE, f"spotpool: {why}; not sent")
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

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the emulator and the operator's metrics say what was called."""


class _Server(CappedServer):
    max_connections = MAX_CONNECTIONS

    def __init__(self, endpoint: str | None, buckets: Buckets, limited: bool) -> None:
        self.endpoint = endpoint
        self.buckets = buckets
        self.limited = limited  # calls take tokens from the buckets
        self.runs: dict[str, Check | None] = {}  # admitted runs: token -> their fence
        self.keys: dict[str, _Issued] = {}  # placeholder SecretId -> the run's keys
        self.refused = 0  # calls refused (fence, signature, host), for tests and logs
        super().__init__(("127.0.0.1", 0), _Handler)

    def secret_key_of(self, secret_id: str) -> str | None:
        issued = self.keys.get(secret_id)
        return issued.secret_key if issued is not None else None

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

    def __init__(
        self, endpoint: str | None, buckets: Buckets = BUCKETS, limited: bool = True
    ) -> None:
        self._server = _Server(endpoint, buckets, limited)
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

    @contextmanager
    def issue(self, env: Mapping[str, str]) -> Iterator[dict[str, str]]:
        """Placeholder keys for one run in place of the real ones in `env` (the provider's
        TENCENTCLOUD_SECRET_ID/KEY/SECURITY_TOKEN): yields the run's variables ("" for the
        token: to be dropped), valid until the block ends. Nothing when `env` has no keys."""
        secret_id = env.get("TENCENTCLOUD_SECRET_ID")
        secret_key = env.get("TENCENTCLOUD_SECRET_KEY")
        if not (secret_id and secret_key):
            yield {}
            return
        token = env.get("TENCENTCLOUD_SECURITY_TOKEN") or None
        real = Credentials(
            secret_id=SecretStr(secret_id),
            secret_key=SecretStr(secret_key),
            token=SecretStr(token) if token else None,
        )
        # Temporary keys of the process's cache: their identity's, renewed as they age.
        live = CREDENTIALS.renewer_for(secret_id) or (lambda: real)
        placeholder = PLACEHOLDER_PREFIX + secrets.token_hex(12).upper()
        journal = journal_of(env.get(STACK_VARIABLE))
        issued = _Issued(secrets.token_urlsafe(30), live, placeholder, journal)
        self._server.keys[placeholder] = issued
        try:
            yield {
                "TENCENTCLOUD_SECRET_ID": placeholder,
                "TENCENTCLOUD_SECRET_KEY": issued.secret_key,
                "TENCENTCLOUD_SECURITY_TOKEN": "",
            }
        finally:
            self._server.keys.pop(placeholder, None)

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


def _quietly(call: Callable[[CreateRecord], None], create: CreateRecord) -> None:
    """Write the create's answer down; a failure only loses the ids (the token is there)."""
    try:
        call(create)
    except Exception as error:
        log.warning("a create's answer could not be recorded: %s", error)


def _without_api(no_proxy: str) -> str:
    return ",".join(
        entry for entry in no_proxy.split(",") if entry.strip() and API_DOMAIN not in entry
    )


_proxies: dict[tuple[str | None, bool], ApiProxy] = {}
_proxies_guard = threading.Lock()


def proxy_at(url: str | None) -> ApiProxy | None:
    """This process's proxy serving at `url` (a run's HTTP_PROXY), if any."""
    with _proxies_guard:
        return next((p for p in _proxies.values() if url and p.url == url), None)


def proxy_for(endpoint: str | None, limited: bool = True) -> ApiProxy:
    """This process's proxy to `endpoint` (None: the real cloud), started on first use;
    `limited`: its calls take the operator's rate-limit tokens."""
    with _proxies_guard:
        found = _proxies.get((endpoint, limited))
        if found is None:
            found = _proxies[(endpoint, limited)] = ApiProxy(endpoint, limited=limited)
        return found
