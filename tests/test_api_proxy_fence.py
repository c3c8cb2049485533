"""The local API proxy is the fence of a run's cloud calls (issue 33, path 3): a fenced run's
call is forwarded only while its fence passes — checked on arrival and again right before the
send, after the wait for a token — and is refused with an API error the provider does not
retry once the writer lost its shard or the run's operation ended. Fast: a recording upstream
in place of the cloud."""

import base64
import http.client
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from pydantic import SecretStr

from spotpool.engine.fencing import run_fence
from spotpool.engine.tencent import tc3
from spotpool.engine.tencent.api_proxy import FENCED_CODE, ApiProxy
from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.proxy_routing import run_token
from spotpool.engine.tencent.ratelimit import Buckets, RateLimits

pytestmark = pytest.mark.unit


class _Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Cloud"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.actions.append(self.headers.get("X-TC-Action") or "")
        data = json.dumps({"Response": {"RequestId": "r-1"}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Cloud(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        self.actions: list[str] = []
        super().__init__(("127.0.0.1", 0), _Recorder)


@pytest.fixture
def cloud() -> Iterator[_Cloud]:
    server = _Cloud()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


_KEYS: dict[str, str] = {}  # the run's placeholder keys (api_proxy.issue), as it signs


@pytest.fixture
def proxy(cloud: _Cloud) -> Iterator[ApiProxy]:
    host, port = cloud.server_address[:2]
    made = ApiProxy(f"http://{host!s}:{port}", Buckets())
    real = {"TENCENTCLOUD_SECRET_ID": "AKIDtest", "TENCENTCLOUD_SECRET_KEY": "k"}
    try:
        with made.issue(real) as issued:
            _KEYS.update(issued)
            yield made
    finally:
        made.close()


def _call(proxy_url: str, action: str = "RunInstances") -> dict[str, object]:
    """One API 3.0 call through the proxy as Go's client sends it (signed with the run's
    placeholder keys; credentials of the proxy URL as Proxy-Authorization)."""
    parts = urlsplit(proxy_url)
    headers = {
        "Host": "cvm.tencentcloudapi.com",
        "X-TC-Action": action,
        "X-TC-Region": "ap-guangzhou",
        "Authorization": "TC3-HMAC-SHA256 Credential=x/2026-11-27/cvm/tc3_request, "
        "SignedHeaders=content-type;host;x-tc-action, Signature=" + "0" * 64,
        "Content-Type": "application/json",
    }
    keys = Credentials(
        secret_id=SecretStr(_KEYS["TENCENTCLOUD_SECRET_ID"]),
        secret_key=SecretStr(_KEYS["TENCENTCLOUD_SECRET_KEY"]),
    )
    headers.update(tc3.resign("POST", "", headers, b"{}", keys, time.time()) or {})
    if parts.username:
        basic = base64.b64encode(f"{parts.username}:{parts.password}".encode()).decode()
        headers["Proxy-Authorization"] = f"Basic {basic}"
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request("POST", "http://cvm.tencentcloudapi.com/", b"{}", headers)
        reply = connection.getresponse()
        assert reply.status == 200
        return dict(json.loads(reply.read())["Response"])
    finally:
        connection.close()


def _refusing(why: str = "shard 3 (token 7) is no longer held by this replica") -> None:
    raise RuntimeError(why)


def test_a_fenced_runs_calls_pass_while_its_fence_holds(proxy: ApiProxy, cloud: _Cloud) -> None:
    with proxy.admit(lambda: None) as env:
        reply = _call(env["HTTP_PROXY"])
    assert "Error" not in reply
    assert cloud.actions == ["RunInstances"]
    assert proxy.refused == 0


def test_a_run_whose_writer_lost_the_shard_sends_nothing(proxy: ApiProxy, cloud: _Cloud) -> None:
    with proxy.admit(_refusing) as env:
        for action in ("RunInstances", "TerminateInstances"):
            reply = _call(env["HTTP_PROXY"], action)
            error = reply["Error"]
            assert isinstance(error, dict)
            assert error["Code"] == FENCED_CODE  # not in the provider's retryable codes
            assert "no longer held" in error["Message"]
    assert cloud.actions == []
    assert proxy.refused == 2


def test_a_call_of_a_run_whose_operation_ended_is_refused(proxy: ApiProxy, cloud: _Cloud) -> None:
    with proxy.admit(lambda: None) as env:
        url = env["HTTP_PROXY"]
    reply = _call(url)  # a CLI left running (frozen, thawed) after its operation was over
    assert isinstance(reply["Error"], dict) and reply["Error"]["Code"] == FENCED_CODE
    assert cloud.actions == []


def test_the_fence_is_checked_again_after_the_wait_for_a_token(
    proxy: ApiProxy, cloud: _Cloud
) -> None:
    proxy._server.buckets = Buckets(RateLimits(rates={"RunInstances": 20.0}))
    bucket = proxy._server.buckets.bucket("AKIDtest", "ap-guangzhou", "RunInstances")
    for _ in range(40):  # in debt (a second of tokens, however slow the machine): it waits
        bucket.reserve()
    checks: list[str] = []

    def held_until_the_wait() -> None:
        checks.append("checked")
        if len(checks) > 1:
            _refusing("the shard slipped away while the call waited")

    with proxy.admit(held_until_the_wait) as env:
        reply = _call(env["HTTP_PROXY"])
    assert len(checks) == 2
    assert isinstance(reply["Error"], dict) and reply["Error"]["Code"] == FENCED_CODE
    assert cloud.actions == []


def test_an_unfenced_runs_calls_go_through_as_before(proxy: ApiProxy, cloud: _Cloud) -> None:
    assert "Error" not in _call(proxy.url)
    assert cloud.actions == ["RunInstances"]


def test_run_tokens_are_read_from_basic_proxy_authorization() -> None:
    basic = base64.b64encode(b"run:tok-1").decode()
    assert run_token({"Proxy-Authorization": f"Basic {basic}"}) == "tok-1"
    assert run_token({}) is None
    assert run_token({"Proxy-Authorization": "Basic !!"}) == ""  # malformed: unknown, refused


def test_only_fenced_runs_are_admitted_through_the_proxies(
    proxy: ApiProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("spotpool.engine.tencent.api_proxy._proxies", {(None, True): proxy})
    env = {"HTTP_PROXY": proxy.url, "http_proxy": proxy.url}
    with run_fence.admitted(env, str(tmp_path), None) as unfenced:
        assert unfenced == env  # no keys: none to replace
    with run_fence.admitted(env, str(tmp_path), lambda: None) as fenced:
        assert fenced["HTTP_PROXY"] != proxy.url and "@127.0.0.1" in fenced["HTTP_PROXY"]
        assert fenced["http_proxy"] == fenced["HTTP_PROXY"]


def test_the_backend_of_a_runs_project_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text(
        "name: spotpool\nruntime: python\nbackend:\n  url: s3://state?region=x\n"
    )
    assert run_fence.project_backend(tmp_path) == "s3://state?region=x"
    assert run_fence.project_backend(tmp_path / "none") == ""
