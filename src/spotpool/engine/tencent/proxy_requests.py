"""Reading a request on the two local proxies (tencent/api_proxy.py, fencing/s3_fence.py), bounded
before anything in it is believed: any local process can reach them.

- The body: a Content-Length within the cap, or chunks whose sizes are 1 to 16 hex digits (no
  sign, no `0x`) summing within the cap, each followed by its line end; anything else is a 400
  at once and nothing more is read (never up to the end of the stream).
- Bytes held: every body counts against its server's budget from its reading until its answer
  (`CappedServer.body_budget`); a body that does not fit gets a 503 before it is read.
- Time: the socket's timeout bounds each wait for bytes (the handler's `timeout`), and one
  deadline the whole request from its first byte to its last (`request_deadline`): a client
  that trickles a byte before each timeout is cut off all the same.
- Connections: at most `max_connections` open at once; past it a 503 and the connection closed,
  nothing read.
- The headers a proxy checks and acts on come once (`duplicated`): two `Authorization` headers
  would be verified on one and acted on by the other.
"""

import io
import re
import socket
import threading
import time
from collections.abc import Iterable
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO

MiB = 1024 * 1024
LINE_LIMIT = 4096  # bytes of a chunk's size line (aws-chunked: `<size>;chunk-signature=<64 hex>`)
MAX_TRAILERS = 64  # header lines after the last chunk
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_BUSY_BODY = b"too many connections to the local proxy; retry\n"
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 1\r\n"
    b"Connection: close\r\n" + f"Content-Length: {len(_BUSY_BODY)}\r\n\r\n".encode() + _BUSY_BODY
)


class BadRequest(Exception):
    """A request refused while it was read: its HTTP status and why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def read_chunks(stream: BinaryIO | io.BufferedIOBase, limit: int, reserve: Any = None) -> bytes:
    """`<hex size>[;extensions]` CRLF, data, CRLF … `0` CRLF, trailers, a blank line (HTTP's
    chunking, or the AWS SDK's aws-chunked framing). `reserve(size)` is called before each
    chunk is read (the server's budget). BadRequest for anything else."""
    chunks, total = [], 0
    while size := _chunk_size(stream.readline(LINE_LIMIT)):
        total += size
        if total > limit:
            raise BadRequest(413, f"request body over {limit} bytes")
        if reserve is not None:
            reserve(size)
        data = stream.read(size)
        if len(data) != size or _line(stream.readline(LINE_LIMIT)):
            raise BadRequest(400, "a chunk cut short or not followed by its line end")
        chunks.append(data)
    for _ in range(MAX_TRAILERS):  # trailers (a checksum), up to the blank line
        if not _line(stream.readline(LINE_LIMIT)):
            return b"".join(chunks)
    raise BadRequest(400, f"more than {MAX_TRAILERS} trailer lines")


def _chunk_size(line: bytes) -> int:
    size = _line(line).split(b";", 1)[0].strip()
    if not _CHUNK_SIZE.fullmatch(size):
        raise BadRequest(400, "a chunk size that is not 1 to 16 hex digits")
    return int(size, 16)


def _line(line: bytes) -> bytes:
    """A whole line's content; BadRequest when it is cut off (too long, or the stream ended)."""
    if not line.endswith(b"\n"):
        raise BadRequest(400, "a line of the body too long or cut off")
    return line.strip()


def duplicated(headers: Message, names: Iterable[str]) -> str | None:
    """The first of `names` that the request carries more than once, or None."""
    return next((n for n in names if len(headers.get_all(n) or []) > 1), None)


class _Timed(io.RawIOBase):
    """The socket's bytes, each wait bounded by `idle` seconds and, from a request's first byte
    on, all of them by the request's deadline (`total` seconds later) until `done`."""

    def __init__(self, sock: socket.socket, idle: float, total: float) -> None:
        self.sock, self.idle, self.total = sock, idle, total
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.deadline is None:
            self.sock.settimeout(self.idle)
        else:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request was not read within its deadline")
            self.sock.settimeout(min(self.idle, left))
        count = self.sock.recv_into(buffer)
        if count and self.deadline is None:
            self.deadline = time.monotonic() + self.total
        return count

    def done(self) -> None:
        """The request is read: the next one has a deadline of its own."""
        self.deadline = None
        self.sock.settimeout(self.idle)


class CappedServer(ThreadingHTTPServer):
    """A threading server with at most `max_connections` open at once (past it: 503 and
    closed) and at most `body_budget` bytes of request bodies held at once."""

    daemon_threads = True
    max_connections = 256
    body_budget = 64 * MiB

    def __init__(self, address: tuple[str, int], handler: type["BoundedHandler"]) -> None:
        self._guard = threading.Lock()
        self.connections = 0
        self.refused_connections = 0
        self.body_bytes = 0
        super().__init__(address, handler)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        with self._guard:
            full = self.connections >= self.max_connections
            if full:
                self.refused_connections += 1
            else:
                self.connections += 1
        if full:
            try:
                request.settimeout(1.0)
                request.sendall(_BUSY)
            except OSError:
                pass
        return not full

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._guard:
                self.connections -= 1

    def reserve(self, size: int) -> None:
        """Count `size` more bytes of bodies held; BadRequest (503) when over the budget."""
        with self._guard:
            if self.body_bytes + size > self.body_budget:
                raise BadRequest(503, "the local proxy holds too many request bodies; retry")
            self.body_bytes += size

    def release(self, size: int) -> None:
        with self._guard:
            self.body_bytes -= size


class BoundedHandler(BaseHTTPRequestHandler):
    """A handler whose request is read within `request_deadline` seconds, its body (`read_body`)
    within `max_body` bytes and its server's budget."""

    server: CappedServer
    timeout = 120.0  # seconds of each wait for bytes (or between two requests)
    request_deadline = 60.0  # seconds from a request's first byte to its last
    max_body = 8 * MiB

    def setup(self) -> None:
        super().setup()
        self._held = 0
        self._timed = _Timed(self.connection, float(self.timeout), self.request_deadline)
        plain, self.rfile = self.rfile, io.BufferedReader(self._timed)
        plain.close()  # the socket stays open: it is the connection

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        finally:
            self.server.release(self._held)
            self._held = 0
            self._timed.done()

    def read_body(self) -> bytes:
        """The request's body (HTTP chunking taken off), counted against the server's budget
        until the request is answered. BadRequest: 400 malformed, 413 over `max_body`, 503
        over the budget — nothing more is read."""
        if (twice := duplicated(self.headers, ("Content-Length", "Transfer-Encoding"))) is not None:
            raise BadRequest(400, f"more than one {twice} header")
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            body = read_chunks(self.rfile, self.max_body, self._reserve)
        else:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                raise BadRequest(400, "a Content-Length that is not a number") from None
            if length < 0:
                raise BadRequest(400, "a negative Content-Length")
            if length > self.max_body:
                raise BadRequest(413, f"request body over {self.max_body} bytes")
            self._reserve(length)
            body = self.rfile.read(length) if length else b""
            if len(body) != length:
                raise BadRequest(400, "the body ended before its Content-Length")
        self._timed.done()
        return body

    def _reserve(self, size: int) -> None:
        self.server.reserve(size)
        self._held += size
