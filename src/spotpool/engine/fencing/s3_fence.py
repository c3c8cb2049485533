"""A fencing S3 proxy on 127.0.0.1 between the Pulumi CLI of a fenced run and an `s3://`
backend: the CLI's checkpoint saves become writes a late writer cannot pass.

Pulumi's self-managed backend checks its lock only when it takes it, and saves each checkpoint
with a plain PUT. A CLI frozen mid-`up` with its replica (a paused VM, SIGSTOP) and thawed after
another replica broke its lock would save its checkpoint over the new holder's. So a fenced
run's CLI talks to the backend through this proxy (`admit`: PULUMI_BACKEND_URL names the
proxy, and the run signs with a key id of its own that names it, never the real keys), and the
proxy re-signs each request with the real keys only while:

- the run's fence passes (the shard still held, in the same epoch), checked right before each
  forward: the proxy is in the replica's process, frozen and thawed with the CLI, so a thawed
  run's writes are refused (403 AccessDenied, which the CLI does not retry); and
- a checkpoint save carries `If-Match` with the ETag this run last saw of the checkpoint
  (`If-None-Match: *` if it saw none): a save that passed the check and then stalled on the
  way (a partition that heals) lands only if no one saved the checkpoint since this run read
  it — the new holder's first save moves the ETag, and the late save gets 412.

S3 (since 2024-08), MinIO and versitygw honour these preconditions on PutObject.
The real keys are read as open_backend reads them (the process's and the run's environment).

It trusts no caller: each run gets a key id and a secret of its own, and a request is
forwarded only when its SigV4 signature (sigv4.py) is that run's, made within 15 minutes. A
run reaches only the backend's bucket under its prefix: a path naming another bucket (or
`/bucket@host/…`, which would name another host in virtual-host style), a `..` segment, a
listing outside the prefix, a copy from elsewhere or a bucket-level write is refused (403).
A request is read within bounds (tencent/proxy_requests.py): a body over `MAX_BODY` gets 413
before it is read, a malformed chunk 400, one request `REQUEST_DEADLINE` seconds from its first
byte to its last, `MAX_CONNECTIONS` at once; the headers the proxy checks come once
(`SINGLE_HEADERS`), and a body whose SHA-256 is not the `X-Amz-Content-Sha256` its signature
covers is refused (400 XAmzContentSHA256Mismatch), never forwarded.
"""

import hashlib
import io
import logging
import re
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import urllib3
from minio.credentials.credentials import Credentials
from minio.signer import sign_v4_s3
from pulumi import automation as auto

from spotpool.engine.fencing import sigv4
from spotpool.engine.fencing.s3_upstream import Upstream
from spotpool.engine.tencent.proxy_requests import (
    BadRequest,
    BoundedHandler,
    CappedServer,
    duplicated,
    read_chunks,
)

log = logging.getLogger(__name__)
MAX_BODY = 512 * 1024 * 1024  # bytes: a checkpoint of thousands of resources is tens of MB
REQUEST_DEADLINE = 600.0  # seconds from a request's first byte to its last (512 MB at ~1 MB/s)
MAX_CONNECTIONS = 128  # open at once: the CLIs of the runs in flight
# What the proxy checks and acts on: each present once (verified on one, acted on by another).
SINGLE_HEADERS = ("Authorization", "Host", "X-Amz-Date", "X-Amz-Content-Sha256",
                  "Content-Encoding", "If-Match", "If-None-Match", "X-Amz-Copy-Source")  # fmt: skip
Check = Callable[[], None]  # raises when the run's writer may no longer write
CHECKPOINT = re.compile(r"^\.pulumi/stacks/[^/]+/[^/]+\.json(\.gz|\.zst)?$")
ABSENT = ""  # the ETag of a checkpoint the run saw missing
# Request headers that describe the object or the condition: forwarded and signed again.
_FORWARDED = re.compile(
    r"^(content-type|content-md5|content-language|content-disposition|cache-control|expires"
    r"|range|if-match|if-none-match|if-modified-since|if-unmodified-since"
    r"|x-amz-meta-.*|x-amz-copy-source.*|x-amz-metadata-directive|x-amz-tagging.*"
    r"|x-amz-storage-class|x-amz-server-side-encryption.*)$"
)
_REPLY_SKIPPED = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})


@dataclass
class _Run:
    check: Check | None
    secret: str = field(default_factory=lambda: secrets.token_urlsafe(30))  # signs its calls
    etags: dict[str, str] = field(default_factory=dict)  # checkpoint key -> ETag last seen
    late_saves: int = 0  # its saves the backend refused: another writer saved meanwhile


class _Handler(BoundedHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"
    timeout = 300.0  # seconds a client may stall mid-request (or idle between requests)
    request_deadline = REQUEST_DEADLINE
    max_body = MAX_BODY

    def do_GET(self) -> None:
        fence = self.server.fence
        try:
            raw = self.read_body()  # read even when refused: the connection is kept alive
            body = _decoded_body(self, raw)
        except BadRequest as bad:
            self.close_connection = True  # the rest of the request is not read
            code = {413: "EntityTooLarge", 503: "SlowDown"}.get(bad.status, "IncompleteBody")
            self._reply_error(bad.status, code, f"spotpool: {bad.reason}")
            return
        path, _, query = self.path.partition("?")
        lower = {k.lower(): v for k, v in self.headers.items()}
        run = fence.run_of(self.headers.get("Authorization") or "")
        twice = duplicated(self.headers, SINGLE_HEADERS)
        why = (
            (f"more than one {twice} header" if twice else None)
            or sigv4.problem(self.command, path, query, lower, run.secret if run else None)
            or fence.upstream.confined(self.command, path, query, lower)
            or fence.failure(run)
        )
        if why is not None:
            fence.refused += 1
            log.warning("backend %s refused: %s", self.command, why)
            self._reply_error(403, "AccessDenied", f"spotpool: {why}")
            return
        assert run is not None
        if (mismatch := sigv4.payload_problem(lower, raw)) is not None:
            fence.refused += 1
            log.warning("backend %s refused: %s", self.command, mismatch)
            self._reply_error(400, "XAmzContentSHA256Mismatch", f"spotpool: {mismatch}")
            return
        key = fence.upstream.key(path)
        headers = {k: v for k, v in self.headers.items() if _FORWARDED.match(k.lower())}
        encoding = [e for e in (self.headers.get("Content-Encoding") or "").split(",")
                    if e.strip() and e.strip().lower() != "aws-chunked"]  # fmt: skip
        if encoding:  # the object's own (aws-chunked is the framing, taken off)
            headers["Content-Encoding"] = ",".join(e.strip() for e in encoding)
        checkpoint = bool(CHECKPOINT.match(key))
        condition = fence.condition(run, key) if checkpoint and self.command == "PUT" else {}
        reply = fence.forward(self.command, self.path, {**headers, **condition}, body)
        if condition and fence.unconditional(reply):  # a store without preconditions
            reply = fence.forward(self.command, self.path, headers, body)
        if checkpoint:
            fence.saw(run, key, self.command, reply)
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            if name.lower() not in _REPLY_SKIPPED:
                self.send_header(name, value)
        if self.command == "HEAD":
            self.send_header("Content-Length", reply.headers.get("Content-Length", "0"))
            self.end_headers()
            return
        self.send_header("Content-Length", str(len(reply.data)))
        self.end_headers()
        self.wfile.write(reply.data)

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def _reply_error(self, status: int, code: str, message: str) -> None:
        data = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: refusals are logged on their own."""


def _decoded_body(handler: BoundedHandler, raw: bytes) -> bytes:
    """The request's payload: the AWS SDK's aws-chunked framing (chunk signatures, checksum
    trailers) taken off; the proxy signs the plain bytes again."""
    headers = handler.headers
    encoding = (headers.get("Content-Encoding") or "").lower()
    sha = headers.get("X-Amz-Content-Sha256") or ""
    if "aws-chunked" in encoding or sha.startswith("STREAMING-"):
        raw = read_chunks(io.BytesIO(raw), MAX_BODY)
    return raw


class _Server(CappedServer):
    max_connections = MAX_CONNECTIONS
    body_budget = MAX_BODY  # one body of the largest size at a time, many small ones

    def __init__(self, fence: "S3Fence") -> None:
        self.fence = fence
        super().__init__(("127.0.0.1", 0), _Handler)


@dataclass(frozen=True)
class _Reply:
    status: int
    headers: Mapping[str, str]
    data: bytes


class S3Fence:
    """The fencing proxy of one s3:// backend, serving on a thread until `close`."""

    def __init__(self, backend_url: str, env: Mapping[str, str]) -> None:
        self.upstream = Upstream.parse(backend_url, env)
        self.credentials = Credentials(
            env.get("AWS_ACCESS_KEY_ID") or "",
            env.get("AWS_SECRET_ACCESS_KEY") or "",
            env.get("AWS_SESSION_TOKEN") or None,
        )
        self.runs: dict[str, _Run] = {}
        self.refused = 0  # requests refused by the fence
        self.late_saves = 0  # checkpoint saves the backend refused (412): a later save won
        self.conditional = True  # the store takes If-Match / If-None-Match on PutObject
        self._http = urllib3.PoolManager(maxsize=8, retries=False)
        self._server = _Server(self)
        host, port = self._server.server_address[:2]
        prefix = f"/{self.upstream.prefix}" if self.upstream.prefix else ""
        self.url = (  # the shape LocalS3 and the docs give Pulumi
            f"s3://{self.upstream.bucket}{prefix}?endpoint=http://{host!s}:{port}"
            f"&use_path_style=true&region={self.upstream.region}"
        )
        threading.Thread(
            target=self._server.serve_forever, name="spotpool-s3-fence", daemon=True
        ).start()

    @contextmanager
    def admit(self, check: Check | None) -> Iterator[dict[str, str]]:
        """Admit one Pulumi run: yields the variables that send its backend calls through this
        proxy as itself; they are forwarded while `check` passes, until the block ends."""
        token = "SPOTPOOLRUN" + secrets.token_hex(8).upper()
        run = self.runs[token] = _Run(check)
        try:
            yield {
                "PULUMI_BACKEND_URL": self.url,
                "AWS_ACCESS_KEY_ID": token,
                "AWS_SECRET_ACCESS_KEY": run.secret,  # the run's own: never the real keys
                "AWS_SESSION_TOKEN": "",
            }
        finally:
            self.runs.pop(token, None)
        if run.late_saves:  # the CLI reports such a run as done (exit 0): it is not
            raise auto.CommandError(
                auto.CommandResult(
                    stdout="",
                    stderr="error: the run's checkpoint saves were refused: another writer "
                    "saved the stack since this run read it (this run's state is not kept)",
                    code=1,
                )
            )

    def run_of(self, authorization: str) -> _Run | None:
        found = re.search(r"Credential=([^/,\s]+)/", authorization)
        return self.runs.get(found.group(1)) if found else None

    @staticmethod
    def failure(run: _Run | None) -> str | None:
        """Why `run` may not reach the backend now, or None when it may."""
        if run is None:
            return "the Pulumi run that sent this request is over (its operation ended)"
        if run.check is None:
            return None
        try:
            run.check()
        except Exception as error:  # the fence's own refusal (NotServed), whatever its type
            return str(error) or type(error).__name__
        return None

    def condition(self, run: _Run, key: str) -> dict[str, str]:
        """The precondition of a checkpoint save: unchanged since this run last saw it."""
        seen = run.etags.get(key)
        if not self.conditional or seen is None:
            return {}
        return {"If-None-Match": "*"} if seen == ABSENT else {"If-Match": seen}

    def unconditional(self, reply: "_Reply") -> bool:
        """The store refused the precondition itself (NotImplemented, as some S3-compatible
        stores answer): saves go on fenced by the run check alone, said once."""
        if reply.status not in (400, 501) or b"NotImplemented" not in reply.data:
            return False
        if self.conditional:
            self.conditional = False
            log.warning("the S3 backend does not take conditional writes (If-Match): "
                        "checkpoint saves are fenced by the replica's check alone")  # fmt: skip
        return True

    def saw(self, run: _Run, key: str, method: str, reply: _Reply) -> None:
        """Keep the checkpoint's version this run builds on: the one it first read, then each
        one it wrote. A later read does not move it — the CLI reads the checkpoint again
        before its last save, and a version someone else wrote meanwhile must fail that save."""
        etag = reply.headers.get("ETag")
        if reply.status == 412:
            self.late_saves += 1
            run.late_saves += 1
            log.warning("checkpoint %s not saved: another writer saved it since this run "
                        "read it (a late writer's save refused)", key)  # fmt: skip
        elif method in ("GET", "HEAD"):
            if reply.status == 404:
                run.etags.setdefault(key, ABSENT)  # a save creates it only if still missing
            elif reply.status < 300 and etag:  # a ranged read's ETag is the object's too
                run.etags.setdefault(key, etag)
        elif reply.status < 300 and method == "DELETE":
            run.etags[key] = ABSENT
        elif reply.status < 300 and method == "PUT" and etag:
            run.etags[key] = etag

    def forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> _Reply:
        """Send one request to the real backend, signed with the real keys."""
        raw_path, _, raw_query = path.partition("?")
        host, target = self.upstream.target(raw_path)
        query = urlencode(
            sorted(parse_qsl(raw_query, keep_blank_values=True)), quote_via=quote, safe="-_.~"
        )
        digest = hashlib.sha256(body).hexdigest()
        headers = {
            **headers,
            "Host": host,
            "X-Amz-Date": datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"),
            "X-Amz-Content-Sha256": digest,
        }
        if self.credentials.session_token:
            headers["X-Amz-Security-Token"] = self.credentials.session_token
        url = urlsplit(f"{self.upstream.scheme}://{host}{target}?{query}")
        signed = sign_v4_s3(
            method=method,
            url=url,
            region=self.upstream.region,
            headers=headers,  # type: ignore[arg-type]
            credentials=self.credentials,
            content_sha256=digest,
            date=datetime.strptime(headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC),
        )
        try:
            reply = self._http.request(
                method,
                url.geturl(),
                body=body or None,
                headers={k: str(v) for k, v in signed.items()},
                redirect=False,
                preload_content=True,
                decode_content=False,  # the bytes as stored: the client decodes what it asked
            )
        except urllib3.exceptions.HTTPError as error:
            message = f"backend unreachable: {type(error).__name__}"
            return _Reply(502, {"Content-Type": "text/plain"}, message.encode())
        return _Reply(reply.status, dict(reply.headers), reply.data)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._http.clear()


_fences: dict[tuple[str, str], S3Fence] = {}
_guard = threading.Lock()


def fence_for(backend_url: str, env: Mapping[str, str]) -> S3Fence:
    """This process's fencing proxy of `backend_url` (with the keys in `env`), started on
    first use."""
    key = (backend_url, env.get("AWS_ACCESS_KEY_ID") or "")
    with _guard:
        found = _fences.get(key)
        if found is None:
            found = _fences[key] = S3Fence(backend_url, env)
        return found
