"""A stand-in for the Tencent Cloud API that checks signatures with the real keys (as the API
does) and records what reaches it, and a DescribeInstances signed as the provider signs, through an
HTTP proxy, as the provider sends its calls."""

import http.client
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException

from spotpool.emulator.errors import ApiError
from spotpool.emulator.signature import SignedRequest, verify
from spotpool.engine.tencent import tc3


class Cloud(ThreadingHTTPServer):
    """Answers API calls signed with the real keys (as the API checks them); records every
    request that reaches it, signed or not."""

    daemon_threads = True

    def __init__(self, keys: dict[str, str]) -> None:
        self.keys = keys
        self.calls: list[dict[str, str]] = []  # headers of every request that arrived
        self.callers: list[str] = []  # SecretIds of the verified ones
        super().__init__(("127.0.0.1", 0), CloudHandler)


class CloudHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Cloud

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.calls.append(headers)
        request = SignedRequest(self.command, "/", "", headers, body)
        try:
            caller = verify(request, self.server.keys, time.time())
            self.server.callers.append(caller.secret_id)
            reply: dict[str, object] = {"TotalCount": 0, "InstanceSet": [], "RequestId": "r"}
        except ApiError as error:
            reply = {"Error": {"Code": error.code, "Message": error.message}, "RequestId": "r"}
        data = json.dumps({"Response": reply}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST

    def log_message(self, format: str, *args: object) -> None:
        pass


def serve(server: ThreadingHTTPServer) -> Iterator[ThreadingHTTPServer]:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def describe(proxy_url: str, secret_id: str, secret_key: str, token: str | None = None) -> object:
    """DescribeInstances through the proxy, signed as the provider signs (its SDK, as the
    toolchain builds it, covers content-type, host and x-tc-action): plain HTTP to
    cvm.tencentcloudapi.com, the proxy as the HTTP proxy. Raises the SDK's exception on an
    error answer."""
    body, now = b"{}", int(time.time())
    date = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d")
    names = ["content-type", "host", "x-tc-action"]
    headers = {
        "host": "cvm.tencentcloudapi.com",
        "content-type": "application/json",
        "x-tc-action": "DescribeInstances",
        "x-tc-version": "2017-03-12",
        "x-tc-region": "ap-guangzhou",
        "x-tc-timestamp": str(now),
        **({"x-tc-token": token} if token else {}),
    }
    signed = tc3.signature("POST", "", headers, body, secret_key, ("cvm", date, names), now)
    headers["authorization"] = (
        f"TC3-HMAC-SHA256 Credential={secret_id}/{date}/cvm/tc3_request, "
        f"SignedHeaders={';'.join(names)}, Signature={signed}"
    )
    connection = http.client.HTTPConnection(proxy_url.removeprefix("http://"), timeout=10)
    try:
        connection.request("POST", "http://cvm.tencentcloudapi.com/", body, headers)
        reply = json.loads(connection.getresponse().read())["Response"]
    finally:
        connection.close()
    if "Error" in reply:
        error = reply["Error"]
        raise TencentCloudSDKException(error["Code"], error["Message"], reply.get("RequestId"))
    return reply
