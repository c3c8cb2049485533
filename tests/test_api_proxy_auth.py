"""The local API proxy trusts no caller (issue 41, item 3): a run signs with placeholder keys of
its own, the proxy checks that signature before it signs the call again with the real keys,
and nothing else leaves — not a forged call, not one naming a temporary SecretId, not one to
any host but the API's. Real HTTP servers on 127.0.0.1 and the official SDK's signing; the
"cloud" checks the re-signed call with the real keys as the API would."""

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import SecretStr
from tencentcloud.common.exception.tencent_cloud_sdk_exception import (
    TencentCloudSDKException,
)

from spotpool.engine.fencing import run_fence
from spotpool.engine.tencent import api_proxy, proxy_routing, tc3
from spotpool.engine.tencent.api_proxy import ApiProxy
from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.identities import CredentialCache
from spotpool.engine.tencent.ratelimit import Buckets
from tests._support.api_cloud import Cloud, describe, serve

pytestmark = pytest.mark.unit

REAL_ID, REAL_KEY = "AKIDrealpermanent0001", "real-secret-key-0001"


@pytest.fixture
def cloud() -> Iterator[Cloud]:
    server = Cloud({REAL_ID: REAL_KEY})
    yield from serve(server)  # type: ignore[misc]


@pytest.fixture
def proxy(cloud: Cloud) -> Iterator[ApiProxy]:
    host, port = cloud.server_address[:2]
    made = ApiProxy(f"http://{host!s}:{port}", Buckets())
    try:
        yield made
    finally:
        made.close()


def test_a_run_signs_with_its_placeholder_keys_and_the_cloud_sees_the_real_ones(
    proxy: ApiProxy, cloud: Cloud, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_proxy, "_proxies", {(None, True): proxy})
    env = {**proxy.env(), "TENCENTCLOUD_SECRET_ID": REAL_ID, "TENCENTCLOUD_SECRET_KEY": REAL_KEY}
    with run_fence.admitted(env, str(tmp_path), None) as run_env:
        assert REAL_ID not in run_env.values() and REAL_KEY not in run_env.values()
        assert "TENCENTCLOUD_SECURITY_TOKEN" not in run_env
        describe(proxy.url, run_env["TENCENTCLOUD_SECRET_ID"], run_env["TENCENTCLOUD_SECRET_KEY"])
        placeholder = dict(run_env)
    assert cloud.callers == [REAL_ID]  # re-signed with the real keys, verified by the cloud
    with pytest.raises(TencentCloudSDKException) as refused:  # the run is over: keys dropped
        describe(
            proxy.url, placeholder["TENCENTCLOUD_SECRET_ID"], placeholder["TENCENTCLOUD_SECRET_KEY"]
        )
    assert refused.value.code == api_proxy.REFUSED_CODE
    assert len(cloud.calls) == 1


def test_a_forged_call_with_a_wrong_signature_is_refused_and_never_sent(
    proxy: ApiProxy, cloud: Cloud
) -> None:
    with proxy.issue(
        {"TENCENTCLOUD_SECRET_ID": REAL_ID, "TENCENTCLOUD_SECRET_KEY": REAL_KEY}
    ) as run_env:
        placeholder = run_env["TENCENTCLOUD_SECRET_ID"]
        for secret_id, secret_key in [
            (placeholder, "a-guess"),  # the run's id (in its /proc environ? no: guessed)
            (REAL_ID, "a-guess"),  # the real id, a public key id
            ("AKIDanythingelse", "x"),
        ]:
            with pytest.raises(TencentCloudSDKException) as refused:
                describe(proxy.url, secret_id, secret_key)
            assert refused.value.code == api_proxy.REFUSED_CODE
    assert cloud.calls == []
    assert proxy.refused == 3


def test_a_call_naming_a_temporary_secret_id_is_not_signed_for_it(
    proxy: ApiProxy, cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: any caller naming a SecretId of the process's credential cache had its call
    re-signed with that identity's live keys."""
    cache = CredentialCache()
    monkeypatch.setattr(api_proxy, "CREDENTIALS", cache)
    cloud.keys["AKIDtemporary01"] = "temporary-secret"
    live = Credentials(
        secret_id=SecretStr("AKIDtemporary01"),
        secret_key=SecretStr("temporary-secret"),
        token=SecretStr("tok"),
        expires=time.time() + 3600,
    )
    cache.get("role:x", lambda: live)
    with pytest.raises(TencentCloudSDKException) as refused:
        describe(proxy.url, "AKIDtemporary01", "not-the-key", "tok")
    assert refused.value.code == api_proxy.REFUSED_CODE
    assert cloud.calls == []


def test_a_call_to_another_host_never_leaves(proxy: ApiProxy, cloud: Cloud) -> None:
    """The real-cloud proxy (no endpoint): a Host that is not <service>.tencentcloudapi.com
    is sent nowhere — here a listener on 127.0.0.1 stands for any other host. Each call is
    signed with the run's placeholder keys, so the host rule is what refuses it (before, an
    all-zero signature was refused whatever the host rule said)."""
    other = Cloud({})
    threading.Thread(target=other.serve_forever, daemon=True).start()
    real = ApiProxy(None, Buckets())
    try:
        host, port = other.server_address[:2]
        with real.issue(
            {"TENCENTCLOUD_SECRET_ID": REAL_ID, "TENCENTCLOUD_SECRET_KEY": REAL_KEY}
        ) as run_env:
            for target, host_header in [
                (f"http://{host!s}:{port}/", f"{host!s}:{port}"),
                (f"http://cvm.tencentcloudapi.com@{host!s}:{port}/", "cvm.tencentcloudapi.com"),
                ("http://cvm.tencentcloudapi.com/", f"{host!s}:{port}"),
            ]:
                error = _signed(real.url, target, host_header, run_env)["Error"]
                assert isinstance(error, dict)
                assert error["Code"] == api_proxy.REFUSED_CODE, (target, host_header)
                assert "names a host other than" in str(error["Message"]), error
        assert other.calls == []
    finally:
        real.close()
        other.shutdown()
        other.server_close()
    # The control: the same call, signed the same way, to the API's host is forwarded.
    with proxy.issue(
        {"TENCENTCLOUD_SECRET_ID": REAL_ID, "TENCENTCLOUD_SECRET_KEY": REAL_KEY}
    ) as run_env:
        answer = _signed(
            proxy.url, "http://cvm.tencentcloudapi.com/", "cvm.tencentcloudapi.com", run_env
        )
    assert "Error" not in answer, answer
    assert cloud.callers == [REAL_ID]


def test_two_authorization_headers_are_refused(proxy: ApiProxy, cloud: Cloud) -> None:
    """Before: the call was verified on its last Authorization and re-signed with the real keys
    of the run its first one named — run A's call went out with run B's account."""
    cloud.keys["AKIDotheraccount01"] = "other-secret"
    with (
        proxy.issue(
            {"TENCENTCLOUD_SECRET_ID": REAL_ID, "TENCENTCLOUD_SECRET_KEY": REAL_KEY}
        ) as mine,
        proxy.issue(
            {
                "TENCENTCLOUD_SECRET_ID": "AKIDotheraccount01",
                "TENCENTCLOUD_SECRET_KEY": "other-secret",
            }
        ) as theirs,
    ):
        theirs_named = (
            "Authorization",
            f"TC3-HMAC-SHA256 Credential={theirs['TENCENTCLOUD_SECRET_ID']}/2026-01-01/cvm/"
            "tc3_request, SignedHeaders=content-type;host;x-tc-action, Signature=" + "0" * 64,
        )
        api = ("http://cvm.tencentcloudapi.com/", "cvm.tencentcloudapi.com")
        error = _signed(proxy.url, *api, mine, first=[theirs_named])["Error"]
        assert isinstance(error, dict) and error["Code"] == api_proxy.REFUSED_CODE, error
        assert "more than one Authorization" in str(error["Message"])
        assert cloud.calls == []
        assert "Error" not in _signed(proxy.url, *api, mine)  # the control: one header
    assert cloud.callers == [REAL_ID]


def test_an_unsigned_action_is_refused(proxy: ApiProxy, cloud: Cloud) -> None:
    """Before: X-TC-Action was outside the signature, so a seen DescribeInstances could be
    sent again as TerminateInstances with the same body and a valid signature."""
    api = ("http://cvm.tencentcloudapi.com/", "cvm.tencentcloudapi.com")
    with proxy.issue(
        {"TENCENTCLOUD_SECRET_ID": REAL_ID, "TENCENTCLOUD_SECRET_KEY": REAL_KEY}
    ) as run_env:
        unsigned = _signed(
            proxy.url, *api, run_env, signed=("content-type", "host"), action="TerminateInstances"
        )
        error = unsigned["Error"]
        assert isinstance(error, dict) and error["Code"] == "AuthFailure.SignatureFailure", error
        assert "X-TC-Action" in str(error["Message"])
        swapped = _signed(proxy.url, *api, run_env, action="TerminateInstances")["Error"]
        assert isinstance(swapped, dict) and "does not match" in str(swapped["Message"])
        assert cloud.calls == []
        assert "Error" not in _signed(proxy.url, *api, run_env)  # the control: signed, as sent
    assert cloud.callers == [REAL_ID]


def _signed(
    proxy_url: str,
    target: str,
    host: str,
    run_env: dict[str, str],
    first: list[tuple[str, str]] | None = None,
    signed: tuple[str, ...] = ("content-type", "host", "x-tc-action"),
    action: str = "DescribeInstances",
) -> dict[str, object]:
    """A DescribeInstances to `target` with this Host, signed (TC3) with the run's placeholder
    keys over the `signed` headers; `first`: headers sent before the others; `action`: the
    X-TC-Action sent (after signing)."""
    body, now = b"{}", int(time.time())
    date = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d")
    headers = {"host": host, "content-type": "application/json",
               "x-tc-action": "DescribeInstances", "x-tc-timestamp": str(now)}  # fmt: skip
    secret_id, secret_key = run_env["TENCENTCLOUD_SECRET_ID"], run_env["TENCENTCLOUD_SECRET_KEY"]
    scope = ("cvm", date, list(signed))
    signature = tc3.signature("POST", "", headers, body, secret_key, scope, now)
    authorization = (
        f"TC3-HMAC-SHA256 Credential={secret_id}/{date}/cvm/tc3_request, "
        f"SignedHeaders={';'.join(signed)}, Signature={signature}"
    )
    headers["x-tc-action"] = action
    connection = http.client.HTTPConnection(proxy_url.removeprefix("http://"), timeout=10)
    try:
        connection.putrequest("POST", target, skip_host=True, skip_accept_encoding=True)
        sent = [*(first or []), *headers.items(), ("Authorization", authorization)]
        for name, value in [*sent, ("Content-Length", str(len(body)))]:
            connection.putheader(name, value)
        connection.endheaders(body)
        return dict(json.loads(connection.getresponse().read())["Response"])
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("cvm.tencentcloudapi.com", "cvm.tencentcloudapi.com"),
        ("CVM.tencentcloudapi.com:443", "cvm.tencentcloudapi.com"),
        ("cvm.ap-guangzhou.tencentcloudapi.com", "cvm.ap-guangzhou.tencentcloudapi.com"),
        ("eviltencentcloudapi.com", None),  # no dot boundary
        ("tencentcloudapi.com.evil.example", None),
        ("cvm.tencentcloudapi.com:8080", None),
        ("user@cvm.tencentcloudapi.com", None),
        ("169.254.0.23", None),
    ],
)
def test_only_api_hosts_with_a_dot_boundary(host: str, allowed: str | None) -> None:
    assert proxy_routing.api_host(host) == allowed


def test_a_body_over_the_cap_is_refused_before_it_is_read(proxy: ApiProxy, cloud: Cloud) -> None:
    port = int(proxy.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(
            b"POST http://cvm.tencentcloudapi.com/ HTTP/1.1\r\nHost: cvm.tencentcloudapi.com\r\n"
            + f"Content-Length: {api_proxy.MAX_BODY + 1}\r\n\r\n".encode()
        )
        answer = raw.recv(200)  # no body sent: a proxy that waits for it times out here
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert cloud.calls == []


def test_expired_temporary_secret_ids_are_dropped() -> None:
    now = [1000.0]
    cache = CredentialCache(clock=lambda: now[0])
    serial = iter(range(100))

    def fetch() -> Credentials:
        n = next(serial)
        return Credentials(
            secret_id=SecretStr(f"AKIDtmp{n}"),
            secret_key=SecretStr("k"),
            token=SecretStr("t"),
            expires=now[0] + 60,
        )

    cache.get("role:y", fetch)
    assert cache.renewer_for("AKIDtmp0") is not None
    now[0] += 61  # past its expiry (renewed meanwhile at 2/3 of its life)
    cache.get("role:y", fetch)
    assert cache.renewer_for("AKIDtmp0") is None
    assert "AKIDtmp0" not in cache._issued_to
    renew = cache.renewer_for("AKIDtmp1")
    assert renew is not None and renew().secret_id.get_secret_value() == "AKIDtmp1"


def test_a_client_that_stalls_mid_request_is_cut_off(
    proxy: ApiProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert api_proxy._Handler.timeout is not None  # before: none, a stalled client held a thread
    monkeypatch.setattr(api_proxy._Handler, "timeout", 0.5)
    port = int(proxy.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(b"POST http://cvm.tencentcloudapi.com/ HTTP/1.1\r\nHost: cvm.tencent")
        assert raw.recv(100) == b""  # closed by the proxy: our own timeout (10 s) raises
