"""The S3 client of the backend's files (lock recovery, history pruning, preview copies)
addresses a bucket as Pulumi's does: virtual-hosted (`https://<bucket>.<endpoint>/…`), which
Tencent COS requires of buckets made after 2024-01-01 (`PathStyleDomainForbidden`), unless the
URL asks for the path style (a local S3 server) or the endpoint is an IP address."""

import pytest

from spotpool.engine.state.backend_files import S3Backend, open_backend

pytestmark = pytest.mark.unit

BUCKET = "examplebucket-1250000000"


def _object_url(backend_url: str) -> str:
    files = open_backend(backend_url, {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "k"})
    assert isinstance(files, S3Backend)
    built = files.client._base_url.build(  # the URL minio sends the request to
        method="GET", region="ap-singapore", bucket_name=files.bucket, object_name=".pulumi/x"
    )
    return built.geturl()


def test_cos_is_addressed_virtual_hosted() -> None:
    url = f"s3://{BUCKET}?endpoint=https://cos.ap-singapore.myqcloud.com&region=ap-singapore"
    assert _object_url(url) == f"https://{BUCKET}.cos.ap-singapore.myqcloud.com/.pulumi/x"


def test_path_style_when_asked_or_on_an_ip_address() -> None:
    asked = f"s3://{BUCKET}?endpoint=https://cos.ap-singapore.myqcloud.com&use_path_style=true"
    assert _object_url(asked) == f"https://cos.ap-singapore.myqcloud.com/{BUCKET}/.pulumi/x"
    local = "s3://state?endpoint=http://127.0.0.1:7070&region=ap-singapore"
    assert _object_url(local) == "http://127.0.0.1:7070/state/.pulumi/x"
