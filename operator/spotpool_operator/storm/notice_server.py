"""The operator's termination-notice endpoint: `POST /v1/notices` from the pools' agents.

It only parses and answers; the reconciler (notices.py) checks each report and acts on it.
The endpoint faces the instances' network, so it bounds what anyone there can make it hold:
connections at once (in all and from one address), how long one connection lives, and how
many reports a second it reads (from one address; then from one pool — a report counts for the
pool whose slot token signed it — and in all): past those a connection is answered 503 and
closed, a report 429, before anything else is done with it. One pool's instances (a tenant's
own, holding their tokens) cannot use up what the other pools' notices need, and reports
signed by no pool's token have a bucket of their own.
"""

import asyncio
import json
import logging
import time
from dataclasses import dataclass

from aiohttp import web

from spotpool.api.notices import (
    CHECKPOINT_PATH,
    REPORT_PATH,
    SIGNATURE_HEADER,
    signature_problem,
    slot_token,
)
from spotpool_operator.storm.notices import Notices

log = logging.getLogger("spotpool_operator.notices")
MAX_BODY = 4096  # a report is about 150 bytes
_BUSY_BODY = b'{"message": "too many connections; retry"}'
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Retry-After: 2\r\nConnection: close\r\n"
    + f"Content-Length: {len(_BUSY_BODY)}\r\n\r\n".encode()
    + _BUSY_BODY
)


@dataclass(frozen=True)
class NoticeLimits:
    """What the endpoint holds at most. A report takes milliseconds and one instance sends
    one; a storm of reclaims sends one per instance within seconds, possibly all from one
    address (a load balancer's): the per-address bounds leave room for that."""

    connections: int = 128  # open at once, in all
    connections_per_peer: int = 32  # open at once from one address
    connection_life: float = 10.0  # seconds a connection may stay open, whatever it does
    reports_per_second: float = 50.0  # read, in all (a bucket: `burst` at once)
    burst: int = 200
    peer_reports_per_second: float = 20.0  # read, from one address
    peer_burst: int = 100
    pool_reports_per_second: float = 10.0  # signed by one pool's tokens (a storm: one each)
    pool_burst: int = 100


class _Bucket:
    """A token bucket: `rate` a second, `burst` at most."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, float(burst)
        self.tokens, self.stamp = float(burst), time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class _Gate(asyncio.Protocol):
    """Admits a new connection to the web server, or answers 503 and closes it."""

    def __init__(self, server: "NoticeServer") -> None:
        self.server = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.server.admit(transport)


class NoticeServer:
    def __init__(
        self, notices: Notices, host: str, port: int, limits: NoticeLimits | None = None
    ) -> None:
        self.notices, self.host, self.port = notices, host, port
        self.limits = limits or NoticeLimits()
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self._open: dict[asyncio.Transport, str] = {}  # admitted connection -> peer address
        self._bucket = _Bucket(self.limits.reports_per_second, self.limits.burst)
        self._unsigned = _Bucket(self.limits.reports_per_second, self.limits.burst)
        self._peer_buckets: dict[str, _Bucket] = {}
        self._pool_buckets: dict[str, _Bucket] = {}
        self.refused_connections = 0

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post(REPORT_PATH, self._report)
        app.router.add_post(CHECKPOINT_PATH, self._report)
        app.router.add_get("/healthz", self._health)
        self._runner = web.AppRunner(app, access_log=None, keepalive_timeout=2.0)
        await self._runner.setup()
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            lambda: _Gate(self), self.host, self.port, reuse_address=True
        )
        log.info("termination notices on http://%s:%d%s", self.host, self.port, REPORT_PATH)

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for transport in list(self._open):
            transport.abort()
        self._open.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def admit(self, transport: asyncio.Transport) -> None:
        """Hand the connection to the web server when the bounds allow it, with its life
        bounded; else answer 503 and close it."""
        peer = _peer(transport)
        self._open = {t: p for t, p in self._open.items() if not t.is_closing()}
        from_peer = sum(1 for p in self._open.values() if p == peer)
        server = self._runner.server if self._runner is not None else None
        if (
            server is None
            or len(self._open) >= self.limits.connections
            or from_peer >= self.limits.connections_per_peer
        ):
            self.refused_connections += 1
            if self.refused_connections % 100 == 1:
                log.warning(
                    "notice endpoint: refusing connections (%d open, %d from %s); %d so far",
                    len(self._open), from_peer, peer, self.refused_connections,
                )  # fmt: skip
            transport.write(_BUSY)
            transport.close()
            asyncio.get_running_loop().call_later(1.0, transport.abort)  # if it reads nothing
            return
        self._open[transport] = peer
        handler = server()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        asyncio.get_running_loop().call_later(self.limits.connection_life, transport.abort)

    def _taken(self, buckets: dict[str, _Bucket], key: str, rate: float, burst: int) -> bool:
        bucket = buckets.get(key)
        if bucket is None:
            if len(buckets) > 10_000:  # bounded memory: forget the quiet ones
                buckets.clear()
            bucket = buckets[key] = _Bucket(rate, burst)
        return bucket.take()

    def _pool_limited(self, body: bytes, signature: str) -> str | None:
        """Why the report waits (429), after its address's bucket: its pool's bucket (the
        report signed by a slot token of that pool), then the bucket of all signed reports;
        one of its own for a report no pool's token signed. None: it is read."""
        pool = _signed_pool(self.notices, body, signature)
        if pool is None:
            return None if self._unsigned.take() else "too many reports; retry"
        limits = self.limits
        if not self._taken(self._pool_buckets, pool, limits.pool_reports_per_second,
                           limits.pool_burst):  # fmt: skip
            return "too many reports for this pool; retry"
        return None if self._bucket.take() else "too many reports; retry"

    async def _report(self, request: web.Request) -> web.Response:
        limits = self.limits
        if not self._taken(self._peer_buckets, request.remote or "",
                           limits.peer_reports_per_second, limits.peer_burst):  # fmt: skip
            return self._too_many("too many reports; retry")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            self.notices.metrics.observe_notice("malformed")
            return web.json_response({"message": "report too large"}, status=413)
        signature = request.headers.get(SIGNATURE_HEADER, "")
        if (why := self._pool_limited(body, signature)) is not None:
            return self._too_many(why)
        if request.path == CHECKPOINT_PATH:  # the onNotice command's result
            code, message = self.notices.receive_checkpoint(body, signature)
        else:
            code, message = self.notices.receive_notice(body, signature)
        level = logging.INFO if code < 400 else logging.WARNING
        log.log(level, "%s from %s: %d %s", request.path, request.remote, code, message)
        return web.json_response({"message": message}, status=code)

    def _too_many(self, message: str) -> web.Response:
        self.notices.metrics.observe_notice("rate_limited")
        return web.json_response({"message": message}, status=429, headers={"Retry-After": "2"})

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})


def _signed_pool(notices: Notices, body: bytes, signature: str) -> str | None:
    """The pool uid a report (a notice or a checkpoint) names when one of that pool's slot
    tokens signed it just now, else None."""
    try:
        fields = json.loads(body)
        uid, slot = str(fields["poolUid"]), int(fields["slot"])
        nonce = str(fields.get("nonce") or "")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not 0 < len(uid) <= 64 or slot < 0 or len(nonce) > 64:
        return None
    token = slot_token(notices.settings.engine.notice_key(uid), slot, nonce)
    return uid if signature_problem(token, signature, body, time.time()) is None else None


def _peer(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)
