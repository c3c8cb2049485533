"""The fencing S3 proxy trusts no caller (issue 41, item 3): a request is forwarded only when
its SigV4 signature is the admitted run's own (a key id alone, or another run's secret, gets
AccessDenied), and only inside the backend's bucket and prefix; bodies are capped. A real S3
client (minio) signs; a recording server on 127.0.0.1 stands for the store."""

import io
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from minio import Minio
from minio.error import S3Error

from spotpool.engine.fencing import s3_fence
from spotpool.engine.fencing.s3_fence import S3Fence, Upstream

pytestmark = pytest.mark.unit
REAL = {"AWS_ACCESS_KEY_ID": "REALKEYID0001", "AWS_SECRET_ACCESS_KEY": "real-secret-0001"}


class _Store(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str]] = []  # method, path, key id it was signed by
        super().__init__(("127.0.0.1", 0), _StoreHandler)


class _StoreHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Store

    def do_GET(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        signer = (self.headers.get("Authorization") or "").partition("Credential=")[2]
        self.server.requests.append((self.command, self.path, signer.split("/")[0]))
        data = b"" if self.command in ("PUT", "HEAD") else b"stored"
        self.send_response(200)
        self.send_header("ETag", '"e1"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def store() -> Iterator[_Store]:
    server = _Store()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def fence(store: _Store) -> Iterator[S3Fence]:
    host, port = store.server_address[:2]
    url = f"s3://state/team-a?endpoint=http://{host!s}:{port}&use_path_style=true&region=us-east-1"
    made = S3Fence(url, REAL)
    try:
        yield made
    finally:
        made.close()


def _client(fence: S3Fence, key_id: str, secret: str) -> Minio:
    endpoint = parse_qs(urlsplit(fence.url).query)["endpoint"][0].removeprefix("http://")
    return Minio(endpoint, access_key=key_id, secret_key=secret, region="us-east-1", secure=False)


def _put(client: Minio, bucket: str, key: str) -> None:
    client.put_object(bucket, key, io.BytesIO(b"{}"), 2)


def test_a_runs_own_signature_passes_and_the_store_sees_the_real_keys(
    fence: S3Fence, store: _Store
) -> None:
    with fence.admit(None) as env:
        run = _client(fence, env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"])
        _put(run, "state", "team-a/.pulumi/meta.yaml")
        read = run.get_object("state", "team-a/.pulumi/meta.yaml")
        assert read.read() == b"stored"
        read.release_conn()
    assert store.requests[0][:2] == ("PUT", "/state/team-a/.pulumi/meta.yaml")
    assert {signer for _, _, signer in store.requests} == {REAL["AWS_ACCESS_KEY_ID"]}


def test_a_key_id_without_its_runs_secret_reaches_nothing(fence: S3Fence, store: _Store) -> None:
    with fence.admit(None) as first, fence.admit(None) as second:
        assert first["AWS_SECRET_ACCESS_KEY"] != second["AWS_SECRET_ACCESS_KEY"]
        for secret in ("a-guess", second["AWS_SECRET_ACCESS_KEY"]):
            forged = _client(fence, first["AWS_ACCESS_KEY_ID"], secret)
            with pytest.raises(S3Error) as refused:
                _put(forged, "state", "team-a/.pulumi/stacks/spotpool/x.json")
            assert refused.value.code == "AccessDenied"
    assert store.requests == []


def test_a_run_is_confined_to_its_bucket_and_prefix(fence: S3Fence, store: _Store) -> None:
    with fence.admit(None) as env:
        run = _client(fence, env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"])
        for attempt in (
            lambda: _put(run, "other-bucket", "team-a/.pulumi/x"),
            lambda: _put(run, "state", "team-b/.pulumi/x"),  # another team's prefix
            lambda: run.get_object("state", "team-b/.pulumi/stacks/spotpool/y.json"),
            lambda: list(run.list_objects("state", prefix="team-b/")),
            lambda: list(run.list_objects("state")),
            lambda: run.remove_bucket("state"),
        ):
            with pytest.raises(S3Error) as refused:
                attempt()
            assert refused.value.code == "AccessDenied"
    assert store.requests == []


@pytest.mark.parametrize(
    "path",
    ["/state@evil.example/x", "/state@evil.example", "/other/x", "/state/../other/team-a/x",
     "/state/team-a/../team-b/x", "/statex/team-a/x"],
)  # fmt: skip
def test_paths_that_escape_the_bucket_are_refused(path: str) -> None:
    cos = Upstream.parse("s3://state/team-a?endpoint=https://cos.example.com&region=r", {})
    assert cos.confined("GET", path, "", {}) is not None
    assert cos.confined("GET", "/state/team-a/.pulumi/x", "", {}) is None
    copied = {"x-amz-copy-source": "/other/team-a/x"}
    assert cos.confined("PUT", "/state/team-a/.pulumi/x", "", copied) is not None


def test_a_body_over_the_cap_is_refused_before_it_is_read(fence: S3Fence, store: _Store) -> None:
    port = int(parse_qs(urlsplit(fence.url).query)["endpoint"][0].rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(
            b"PUT /state/team-a/.pulumi/x HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Content-Length: {s3_fence.MAX_BODY + 1}\r\n\r\n".encode()
        )
        answer = raw.recv(200)
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert store.requests == []


def test_the_canonical_query_is_sorted_and_encoded() -> None:
    from spotpool.engine.fencing import sigv4

    assert sigv4.canonical_query("prefix=a b&list-type=2&delimiter=/") == (
        "delimiter=%2F&list-type=2&prefix=a%20b"
    )
