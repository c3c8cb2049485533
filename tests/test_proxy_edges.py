"""Both local proxies (the API proxy, the fencing S3 proxy) read a request within bounds before
anything in it is believed (issue 46, Build 5): a chunk size that is not 1 to 16 hex digits is a
400 at once, nothing more read (before: `-1` read the stream to its end, in memory); one
deadline for a whole request (before: only each wait for a byte, so a trickle held a thread for
ever); a cap on connections at once (before: none). The real servers on 127.0.0.1, sent to
byte by byte; the proxy's memory measured in-process while the flood goes on."""

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from spotpool.engine.fencing import s3_fence
from spotpool.engine.fencing.s3_fence import S3Fence
from spotpool.engine.tencent import api_proxy
from spotpool.engine.tencent.api_proxy import ApiProxy
from spotpool.engine.tencent.ratelimit import Buckets
from tests._support.api_cloud import Cloud, serve
from tests._support.raw_http import answer_to, flood_after, idle_connections, trickle
from tests._support.s3_store import Store

pytestmark = pytest.mark.unit

MiB = 1024 * 1024
FLOOD = 48 * MiB  # what a `-1` chunk would have the proxy hold
REAL = {"AWS_ACCESS_KEY_ID": "REALKEYID0001", "AWS_SECRET_ACCESS_KEY": "real-secret-0001"}


@dataclass
class Proxy:
    name: str
    port: int
    server: Any  # the proxy's server: its connections, its handler class
    request: bytes  # a request line and headers, up to the body


@pytest.fixture(params=["api", "s3"])
def proxy(request: pytest.FixtureRequest) -> Iterator[Proxy]:
    if request.param == "api":
        cloud = Cloud({})
        for _ in serve(cloud):
            made = ApiProxy(f"http://127.0.0.1:{cloud.server_address[1]}", Buckets())
            try:
                yield Proxy("api", int(made.url.rsplit(":", 1)[1]), made._server, _request(
                    b"POST http://cvm.tencentcloudapi.com/ HTTP/1.1", b"cvm.tencentcloudapi.com"
                ))  # fmt: skip
            finally:
                made.close()
            assert cloud.calls == []  # nothing of it ever left
        return
    store = Store()
    for _ in serve(store):
        url = f"s3://state/team-a?endpoint=http://127.0.0.1:{store.server_address[1]}"
        fence = S3Fence(url + "&use_path_style=true&region=us-east-1", REAL)
        try:
            port = int(parse_qs(urlsplit(fence.url).query)["endpoint"][0].rsplit(":", 1)[1])
            yield Proxy("s3", port, fence._server, _request(
                b"PUT /state/team-a/.pulumi/stacks/spotpool/a.json HTTP/1.1", b"127.0.0.1"
            ))  # fmt: skip
        finally:
            fence.close()
        assert store.requests == []


def _request(line: bytes, host: bytes) -> bytes:
    return line + b"\r\nHost: " + host + b"\r\nTransfer-Encoding: chunked\r\n\r\n"


def test_a_minus_one_chunk_is_refused_at_once_with_no_memory_growth(proxy: Proxy) -> None:
    flooded = flood_after(proxy.port, proxy.request + b"-1\r\n", FLOOD)
    assert flooded.answer.startswith(b"HTTP/1.1 400"), flooded.answer[:100]
    assert flooded.growth < 2 * MiB, f"the proxy's memory grew {flooded.growth / MiB:.1f} MiB"
    print(f"\n{proxy.name}: -1 chunk answered after {flooded.sent / MiB:.1f} MiB of the flood "
          f"went out; traced memory grew {flooded.growth / MiB:.2f} MiB")  # fmt: skip


@pytest.mark.parametrize(
    "size", [b"+10", b"0x10", b"zz", b"1_0", b"", b"1" * 17, b" -0"], ids=repr
)  # fmt: skip
def test_a_chunk_size_that_is_not_hex_digits_is_a_400_and_nothing_more_is_read(
    proxy: Proxy, size: bytes
) -> None:
    answer = answer_to(proxy.port, proxy.request + size + b"\r\n" + b"x" * 100)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:100]


def test_a_chunk_over_the_cap_or_a_size_line_that_never_ends_is_refused(proxy: Proxy) -> None:
    assert answer_to(proxy.port, proxy.request + b"fffffffffff\r\n").startswith(b"HTTP/1.1 413")
    endless = proxy.request + b"1" * 8192  # no line end: the proxy stops at its line limit
    assert answer_to(proxy.port, endless).startswith(b"HTTP/1.1 400")


def test_a_well_formed_chunked_body_still_reads(proxy: Proxy) -> None:
    """The control: good chunks, an extension and a trailer, read to the end and judged (refused
    for its signature: no signature at all), not taken for malformed."""
    body = b'4;ext=1\r\n{"a"\r\n2\r\n:1\r\n1\r\n}\r\n0\r\nX-Checksum: 1\r\n\r\n'
    answer = answer_to(proxy.port, proxy.request + body)
    refused = b"HTTP/1.1 200" if proxy.name == "api" else b"HTTP/1.1 403"
    assert answer.startswith(refused), answer[:100]
    assert (b"AuthFailure" if proxy.name == "api" else b"AccessDenied") in answer


def test_a_request_trickled_in_is_cut_off_at_its_deadline(
    proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each byte comes well within the wait for a byte (2 s): before, the request was read for
    as long as the client kept trickling."""
    handler = proxy.server.RequestHandlerClass
    monkeypatch.setattr(handler, "timeout", 2.0)
    monkeypatch.setattr(handler, "request_deadline", 1.0, raising=False)
    closed_after = trickle(proxy.port, proxy.request + b"5\r\nhello\r\n" * 50, 0.1, until=6.0)
    assert closed_after is not None, "still reading the trickle after 6 s"
    assert 0.9 < closed_after < 3.0


def test_connections_past_the_cap_are_answered_503_and_a_freed_place_serves_again(
    proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(type(proxy.server), "max_connections", 3, raising=False)
    with idle_connections(proxy.port, 3) as held:
        assert answer_to(proxy.port, b"", wait=3.0).startswith(b"HTTP/1.1 503")
        held[0].close()
        deadline = time.monotonic() + 5
        while getattr(proxy.server, "connections", 0) > 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        answer = answer_to(proxy.port, proxy.request + b"0\r\n\r\n")
    assert answer.startswith((b"HTTP/1.1 200", b"HTTP/1.1 403")), answer[:100]  # judged
    assert proxy.server.refused_connections == 1


def test_the_module_constants_bound_both_proxies() -> None:
    assert api_proxy._Server.max_connections == api_proxy.MAX_CONNECTIONS
    assert s3_fence._Server.max_connections == s3_fence.MAX_CONNECTIONS
    assert api_proxy._Handler.request_deadline == api_proxy.REQUEST_DEADLINE
    assert s3_fence._Handler.request_deadline == s3_fence.REQUEST_DEADLINE
