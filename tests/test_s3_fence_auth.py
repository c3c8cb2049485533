"""The fencing S3 proxy trusts no caller (issue 41, item 3): a request is forwarded only when
its SigV4 signature is the admitted run's own (a key id alone, or another run's secret, gets
AccessDenied), and only inside the backend's bucket and prefix; bodies are capped. A real S3
client (minio) signs; a recording server on 127.0.0.1 stands for the store."""

import hashlib
import http.client
import io
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest
from minio import Minio
from minio.credentials.credentials import Credentials as MinioCredentials
from minio.error import S3Error
from minio.signer import sign_v4_s3

from spotpool.engine.fencing import s3_fence
from spotpool.engine.fencing.s3_fence import S3Fence
from spotpool.engine.fencing.s3_upstream import Upstream
from tests._support.s3_store import Store

pytestmark = pytest.mark.unit
REAL = {"AWS_ACCESS_KEY_ID": "REALKEYID0001", "AWS_SECRET_ACCESS_KEY": "real-secret-0001"}


@pytest.fixture
def store() -> Iterator[Store]:
    server = Store()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def fence(store: Store) -> Iterator[S3Fence]:
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
    fence: S3Fence, store: Store
) -> None:
    with fence.admit(None) as env:
        run = _client(fence, env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"])
        _put(run, "state", "team-a/.pulumi/meta.yaml")
        read = run.get_object("state", "team-a/.pulumi/meta.yaml")
        assert read.read() == b"stored"
        read.release_conn()
    assert store.requests[0][:2] == ("PUT", "/state/team-a/.pulumi/meta.yaml")
    assert {signer for _, _, signer in store.requests} == {REAL["AWS_ACCESS_KEY_ID"]}


def test_a_key_id_without_its_runs_secret_reaches_nothing(fence: S3Fence, store: Store) -> None:
    with fence.admit(None) as first, fence.admit(None) as second:
        assert first["AWS_SECRET_ACCESS_KEY"] != second["AWS_SECRET_ACCESS_KEY"]
        for secret in ("a-guess", second["AWS_SECRET_ACCESS_KEY"]):
            forged = _client(fence, first["AWS_ACCESS_KEY_ID"], secret)
            with pytest.raises(S3Error) as refused:
                _put(forged, "state", "team-a/.pulumi/stacks/spotpool/x.json")
            assert refused.value.code == "AccessDenied"
    assert store.requests == []


def test_a_run_is_confined_to_its_bucket_and_prefix(fence: S3Fence, store: Store) -> None:
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


def test_a_body_over_the_cap_is_refused_before_it_is_read(fence: S3Fence, store: Store) -> None:
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


def _signed_put(
    fence: S3Fence, env: dict[str, str], body: bytes, signed_body: bytes | None = None
) -> dict[str, str]:
    """The headers of a PUT of `body` to a checkpoint, SigV4-signed with the run's own keys
    over `signed_body` (its payload hash)."""
    endpoint = parse_qs(urlsplit(fence.url).query)["endpoint"][0]
    url = urlsplit(f"{endpoint}/state/team-a/.pulumi/stacks/spotpool/a.json")
    now = datetime.now(UTC).replace(microsecond=0)
    digest = hashlib.sha256(body if signed_body is None else signed_body).hexdigest()
    headers = {"Host": url.netloc, "X-Amz-Date": now.strftime("%Y%m%dT%H%M%SZ"),
               "X-Amz-Content-Sha256": digest, "Content-Length": str(len(body))}  # fmt: skip
    keys = MinioCredentials(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"])
    signed = sign_v4_s3(method="PUT", url=url, region="us-east-1", headers=headers,  # type: ignore[arg-type]
                        credentials=keys, content_sha256=digest, date=now)  # fmt: skip
    return {k: str(v) for k, v in signed.items()}


def _send(fence: S3Fence, headers: list[tuple[str, str]], body: bytes) -> tuple[int, bytes]:
    endpoint = parse_qs(urlsplit(fence.url).query)["endpoint"][0].removeprefix("http://")
    connection = http.client.HTTPConnection(endpoint, timeout=10)
    try:
        connection.putrequest(
            "PUT", "/state/team-a/.pulumi/stacks/spotpool/a.json", skip_host=True,
            skip_accept_encoding=True,
        )  # fmt: skip
        for name, value in headers:
            connection.putheader(name, value)
        connection.endheaders(body)
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


def test_two_authorization_headers_are_refused(fence: S3Fence, store: Store) -> None:
    """Before: the run was found by the first Authorization and the signature checked on the
    last; a request carrying two was forwarded."""
    with fence.admit(None) as env:
        headers = _signed_put(fence, env, b"{}")
        twice = [*headers.items(), ("Authorization", headers["Authorization"])]
        status, data = _send(fence, twice, b"{}")
        assert (status, b"AccessDenied" in data) == (403, True), data
        assert b"more than one Authorization" in data
        assert store.requests == []
        assert _send(fence, list(headers.items()), b"{}")[0] == 200  # the control: one
    assert [method for method, _, _ in store.requests] == ["PUT"]


def test_a_body_that_is_not_the_signed_one_is_refused(fence: S3Fence, store: Store) -> None:
    """X-Amz-Content-Sha256 is in the signed request: before, the body itself was never
    compared with it, so a signed save could carry any other checkpoint of the same length."""
    with fence.admit(None) as env:
        swapped = _signed_put(fence, env, b'{"stack": "other"}', signed_body=b'{"stack": "mine!"}')
        status, data = _send(fence, list(swapped.items()), b'{"stack": "other"}')
        assert (status, b"XAmzContentSHA256Mismatch" in data) == (400, True), data
        assert store.requests == []
        same = _signed_put(fence, env, b'{"stack": "mine!"}')
        assert _send(fence, list(same.items()), b'{"stack": "mine!"}')[0] == 200  # the control
    assert len(store.requests) == 1
