"""The fencing S3 proxy in front of a real S3 server (versitygw), driven by a real S3 client
signing as the admitted run (issue 33, path 3): a run's checkpoint save lands only while its
fence passes and only if no one saved the checkpoint since the run read it (a run with a save
refused so ends as a failed run); a run whose writer lost the shard, or whose operation ended,
reaches nothing; the real keys never reach the run."""

import io
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from minio import Minio
from minio.error import S3Error
from pulumi import automation as auto

from spotpool.cluster import s3
from spotpool.engine.fencing.s3_fence import S3Fence
from spotpool.engine.fencing.s3_upstream import Upstream
from spotpool.engine.state.backend_files import open_backend

pytestmark = pytest.mark.integration
CHECKPOINT = ".pulumi/stacks/spotpool/team-a.gpu.json.gz"
LOCK = ".pulumi/locks/spotpool/team-a.gpu/1234.json"


@pytest.fixture
def fence(s3_server: s3.LocalS3) -> Iterator[S3Fence]:
    made = S3Fence(s3_server.backend_url, s3_server.env)
    try:
        yield made
    finally:
        made.close()


class Flag:
    """A writer's right to write, as the shard's fence says it."""

    def __init__(self) -> None:
        self.held = True

    def check(self) -> None:
        if not self.held:
            raise RuntimeError("shard 2 (token 4) is no longer held by this replica")


def _client(fence: S3Fence, env: dict[str, str]) -> Minio:
    """An S3 client of the run, as the CLI would be: the proxy's URL and the run's keys."""
    assert env["PULUMI_BACKEND_URL"] == fence.url
    endpoint = parse_qs(urlsplit(fence.url).query)["endpoint"][0].removeprefix("http://")
    return Minio(
        endpoint,
        access_key=env["AWS_ACCESS_KEY_ID"],
        secret_key=env["AWS_SECRET_ACCESS_KEY"],
        region=fence.upstream.region,
        secure=False,
    )


def _read(client: Minio, bucket: str, key: str) -> bytes:
    reply = client.get_object(bucket, key)
    try:
        return reply.read()
    finally:
        reply.close()
        reply.release_conn()


def _put(client: Minio, bucket: str, key: str, data: bytes) -> None:
    client.put_object(bucket, key, io.BytesIO(data), len(data))


def test_a_late_save_cannot_pass_a_later_holders_save(
    s3_server: s3.LocalS3, fence: S3Fence
) -> None:
    direct = open_backend(s3_server.backend_url, s3_server.env)
    assert direct is not None
    old, new = Flag(), Flag()
    refused_run = pytest.raises(auto.CommandError, match="saves were refused")
    with refused_run, fence.admit(old.check) as old_env, fence.admit(new.check) as new_env:
        old_run, new_run = _client(fence, old_env), _client(fence, new_env)
        with pytest.raises(S3Error) as missing:
            _read(old_run, s3_server.bucket, CHECKPOINT)
        assert missing.value.code == "NoSuchKey"
        _put(old_run, s3_server.bucket, CHECKPOINT, b"old holder, save 1")  # If-None-Match: *
        _put(old_run, s3_server.bucket, CHECKPOINT, b"old holder, save 2")  # If-Match: save 1
        assert direct.read(CHECKPOINT) == b"old holder, save 2"

        # The old holder stalls after its check; the new holder reads and saves meanwhile.
        assert _read(new_run, s3_server.bucket, CHECKPOINT) == b"old holder, save 2"
        _put(new_run, s3_server.bucket, CHECKPOINT, b"new holder's checkpoint")
        with pytest.raises(S3Error) as late:
            _put(old_run, s3_server.bucket, CHECKPOINT, b"old holder, late save")
        assert late.value.code == "PreconditionFailed"
        assert fence.late_saves == 1
        assert direct.read(CHECKPOINT) == b"new holder's checkpoint"

        # Once the old holder's fence fails, nothing of its run reaches the backend at all.
        old.held = False
        for attempt in (
            lambda: _put(old_run, s3_server.bucket, CHECKPOINT, b"old holder, after thaw"),
            lambda: old_run.remove_object(s3_server.bucket, LOCK),
            lambda: _read(old_run, s3_server.bucket, CHECKPOINT),
        ):
            with pytest.raises(S3Error) as refused:
                attempt()
            assert refused.value.code == "AccessDenied"
        assert fence.refused == 3
        _put(new_run, s3_server.bucket, LOCK, b"{}")  # other keys: fenced by the check alone
        _put(new_run, s3_server.bucket, CHECKPOINT, b"new holder, save 2")
        assert direct.read(CHECKPOINT) == b"new holder, save 2"
    # Admissions over: a CLI left behind (killed late, thawed) reaches nothing either.
    with pytest.raises(S3Error) as over:
        _put(new_run, s3_server.bucket, CHECKPOINT, b"after the operation")
    assert over.value.code == "AccessDenied"
    assert direct.read(CHECKPOINT) == b"new holder, save 2"
    assert sorted(direct.keys(".pulumi/")) == [LOCK, CHECKPOINT]


def test_the_runs_never_see_the_real_keys(s3_server: s3.LocalS3, fence: S3Fence) -> None:
    with fence.admit(None) as env:
        assert s3_server.access_key not in env.values()
        assert s3_server.secret_key not in env.values()
        listed = _client(fence, env).list_objects(s3_server.bucket, prefix=".pulumi/")
        assert list(listed) == []


def test_upstreams_of_path_and_virtual_host_style_urls() -> None:
    cos = Upstream.parse(
        "s3://state-1250000000/ops?endpoint=https://cos.ap-guangzhou.myqcloud.com"
        "&region=ap-guangzhou",
        {},
    )
    assert cos.target("/state-1250000000/ops/.pulumi/meta.yaml") == (
        "state-1250000000.cos.ap-guangzhou.myqcloud.com",
        "/ops/.pulumi/meta.yaml",
    )
    assert cos.key("/state-1250000000/ops/.pulumi/meta.yaml") == ".pulumi/meta.yaml"
    assert cos.scheme == "https" and not cos.path_style
    local = Upstream.parse(
        "s3://b?endpoint=http://127.0.0.1:9000&use_path_style=true&region=us-east-1", {}
    )
    assert local.target("/b/.pulumi/x") == ("127.0.0.1:9000", "/b/.pulumi/x")
    assert local.scheme == "http" and local.key("/b/.pulumi/x") == ".pulumi/x"
