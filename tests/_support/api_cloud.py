"""A stand-in for the Tencent Cloud API that checks signatures with the real keys (as the API
does) and records what reaches it, and a DescribeInstances signed by the official SDK through
an HTTP proxy, as the provider sends its calls."""

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tencentcloud.common.credential import Credential
from tencentcloud.common.profile.client_profile import ClientProfile
from tencentcloud.common.profile.http_profile import HttpProfile
from tencentcloud.cvm.v20170312 import cvm_client, models

from spotpool.emulator.errors import ApiError
from spotpool.emulator.signature import SignedRequest, verify


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
    """DescribeInstances through the proxy, signed by the official SDK as the provider signs:
    plain HTTP to cvm.tencentcloudapi.com, the proxy as the HTTP proxy."""
    profile = ClientProfile(
        httpProfile=HttpProfile(protocol="http", proxy=proxy_url, reqTimeout=10)
    )
    client = cvm_client.CvmClient(Credential(secret_id, secret_key, token), "ap-guangzhou", profile)
    return client.DescribeInstances(models.DescribeInstancesRequest())
