"""Temporary keys given in a Secret (with `token`) are read again while in use (issue 41, item
5): when whoever renews them writes new ones into the Secret, a Pulumi run already going is
re-signed with the new keys by the local API proxy — before, the run signed with the keys it
started with until they expired. Real HTTP servers on 127.0.0.1 and the SDK's signing."""

from collections.abc import Iterator
from typing import Any

import pytest
from spotpool_operator.basics import credentials as pool_credentials
from spotpool_operator.basics.credentials import resolve
from spotpool_operator.reporting.kube import SecretRead

from spotpool.api.spec import SpotpoolSpec
from spotpool.engine.tencent import api_proxy
from spotpool.engine.tencent.api_proxy import ApiProxy
from spotpool.engine.tencent.identities import CredentialCache
from spotpool.engine.tencent.ratelimit import Buckets
from tests._support.api_cloud import Cloud, describe, serve
from tests._support.specs import article_spec

pytestmark = pytest.mark.unit


class _Secrets:
    def __init__(self) -> None:
        self.data = {b"secretId": b"AKIDtemp0001", b"secretKey": b"key-1", b"token": b"tok-1"}
        self.reads = 0

    def read_secret(self, namespace: str, name: str) -> SecretRead:
        self.reads += 1
        return SecretRead({k.decode(): v for k, v in self.data.items()}, consents=True)

    def access_policies(self) -> list[Any]:
        return []  # no policy: an opted-in Secret of the pool's own namespace is usable


@pytest.fixture
def cloud() -> Iterator[Cloud]:
    yield from serve(Cloud({"AKIDtemp0001": "key-1", "AKIDtemp0002": "key-2"}))  # type: ignore[misc]


def test_a_run_is_re_signed_with_the_keys_written_into_the_secret_since_it_started(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    cache = CredentialCache(clock=lambda: now[0])
    monkeypatch.setattr(api_proxy, "CREDENTIALS", cache)
    spec = SpotpoolSpec.model_validate(
        {k: v for k, v in article_spec(credentialsSecretRef={"name": "keys"}).items()
         if k not in ("secretId", "secretKey") and v is not None}
    )  # fmt: skip
    secrets = _Secrets()
    keys = resolve(secrets, "team-a", "gpu", spec, cache=cache)  # type: ignore[arg-type]
    host, port = cloud.server_address[:2]
    proxy = ApiProxy(f"http://{host!s}:{port}", Buckets())
    try:
        with proxy.issue(keys.provider_env()) as run_env:
            run_keys = (run_env["TENCENTCLOUD_SECRET_ID"], run_env["TENCENTCLOUD_SECRET_KEY"])
            describe(proxy.url, *run_keys)
            # Whoever renews the keys writes the next ones into the Secret mid-run.
            secrets.data = {b"secretId": b"AKIDtemp0002", b"secretKey": b"key-2",
                            b"token": b"tok-2"}  # fmt: skip
            now[0] += pool_credentials.SECRET_REREAD * 2 / 3 + 1
            describe(proxy.url, *run_keys)
    finally:
        proxy.close()
    assert cloud.callers == ["AKIDtemp0001", "AKIDtemp0002"]
    assert [c.get("x-tc-token") for c in cloud.calls] == ["tok-1", "tok-2"]
