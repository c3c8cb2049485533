"""No secret reaches a log line (what kopf prints at debug level), a condition or an Event:
masked."""

import base64
import json
import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from spotpool_operator.reporting import logmask
from spotpool_operator.reporting.conditions import with_condition
from spotpool_operator.reporting.events import DirectEvents

from spotpool.api.status import SpotpoolStatus

pytestmark = pytest.mark.unit


def test_secret_fields_are_masked_however_they_are_quoted() -> None:
    spec = {"secretId": "AKIDvisible", "secretKey": "s3cr3t-key", "region": "ap-singapore"}
    annotation = json.dumps({"spec": spec})
    patch = {"metadata": {"annotations": {"last-handled-configuration": annotation}}}
    for text in (repr(spec), json.dumps(spec), repr(patch), json.dumps(patch)):
        masked = logmask.mask(text)
        assert "s3cr3t-key" not in masked, masked
        assert "AKIDvisible" in masked and "ap-singapore" in masked


def test_the_filter_masks_real_records(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("kopf.objects")
    caplog.handler.addFilter(logmask.SecretMask())
    with caplog.at_level(logging.DEBUG):
        logger.debug("Patching with: %r", {"spec": {"secretKey": "s3cr3t", "password": "pw"}})
    assert "s3cr3t" not in caplog.text and "'pw'" not in caplog.text
    assert "Patching with" in caplog.text


def test_request_signatures_are_masked() -> None:
    line = "Authorization: TC3-HMAC-SHA256 Credential=AKID/x, Signature=cef0e8479e546565"
    assert "cef0e8479e546565" not in logmask.mask(line)


def test_notice_tokens_and_keys_are_masked() -> None:
    """The agents' slot token (as the unit's environment file and user data hold it), a pool's
    notice key (stack config, a CLI's `--secret` argument) and the operator's notice secret."""
    token, key = "9f86d081884c7d659a2feaa0c55ad015", "2c26b46b68ffc68ff99b453c1d304134"
    for text in (
        f"content: |\n      SPOTPOOL_NOTICE_TOKEN={token}\n      SPOTPOOL_NOTICE_SLOT=0",
        repr({"SPOTPOOL_NOTICE_TOKEN": token}),
        json.dumps({"env": {"SPOTPOOL_NOTICE_TOKEN": token}}),
        f"pulumi config set-all --secret spotpool:noticeKey={key} --path",
        json.dumps({"spotpool:noticeKey": key}),
        repr({"notice_key": key, "noticeSecret": key, "notice_secret": key}),
    ):
        masked = logmask.mask(text)
        assert token not in masked and key not in masked, masked
    assert "SPOTPOOL_NOTICE_SLOT=0" in logmask.mask(
        f"SPOTPOOL_NOTICE_TOKEN={token} SPOTPOOL_NOTICE_SLOT=0"
    )


def test_the_key_services_token_is_masked() -> None:
    env = {"VAULT_ADDR": "http://127.0.0.1:4100", "VAULT_TOKEN": "kst-visible-token"}
    line = "VAULT_ADDR=http://127.0.0.1:4100 VAULT_TOKEN=kst-visible-token pulumi up"
    for text in (repr(env), json.dumps(env), line):
        masked = logmask.mask(text)
        assert "kst-visible-token" not in masked and "127.0.0.1:4100" in masked, masked


@pytest.mark.parametrize(
    "line",
    [
        "TENCENTCLOUD_SECRET_KEY=zz-visible-secret pulumi up",
        "tencentcloud_secret_key = zz-visible-secret",
        "X-TC-Token: zz-visible-secret",
        "x-tc-token: zz-visible-secret",
        "TENCENTCLOUD_SECURITY_TOKEN=zz-visible-secret",
        json.dumps({"WebIdentityToken": "zz-visible-secret", "RoleArn": "qcs::cam::uin/1"}),
        repr({"webIdentityToken": "zz-visible-secret"}),
        "AWS_SECRET_ACCESS_KEY=zz-visible-secret AWS_SESSION_TOKEN=zz-visible-secret",
        json.dumps(
            {"Credentials": {"Token": "zz-visible-secret", "TmpSecretKey": "zz-visible-secret"}}
        ),
        "X-Amz-Security-Token: zz-visible-secret",
        "PULUMI_CONFIG_PASSPHRASE=zz-visible-secret",
        "pulumi_config_passphrase: 'zz-visible-secret'",
        "LOGINPASSWORD=zz-visible-secret",
        "HTTP_PROXY=http://run:zz-visible-secret@127.0.0.1:4000",
        "Authorization: Bearer zz-visible-secret",
        "X-Vault-Token: zz-visible-secret",
    ],
)
def test_every_token_form_is_masked_whatever_its_case(line: str) -> None:
    """Issue 41: the mask was case-sensitive and missed TENCENTCLOUD_SECRET_KEY=, X-TC-Token,
    WebIdentityToken and their kin."""
    masked = logmask.mask(line)
    assert "zz-visible-secret" not in masked, masked


def test_what_is_not_secret_stays() -> None:
    line = "RoleArn=qcs::cam::uin/1 region=ap-guangzhou PULUMI_CONFIG_PASSPHRASE_FILE=/etc/p"
    line += " max_tokens=5"
    assert logmask.mask(line) == line


JWT = (
    "eyJhbGciOiJSUzI1NiIsImtpZCI6InNwb3Rwb29sIn0"
    ".eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50Iiwic3ViIjoic3BvdHBvb2wifQ"
    ".zz-visible-secret-c2lnbmF0dXJlLW9mLXRoZS10b2tlbg"
)
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAzz-visible-secret\nq1w2e3r4t5y6\n"
    "-----END RSA PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    "line",
    [
        repr({"secretKey": b"zz-visible-secret"}),  # a bytes repr of a value
        repr([(b"X-TC-Token", b"zz-visible-secret"), (b"Host", b"cvm.tencentcloudapi.com")]),
        repr([("X-Vault-Token", "zz-visible-secret")]),  # a list of headers
        repr(b'{"TmpSecretKey": "zz-visible-secret"}'),
        "POST /token?grant=x&client_secret%3Dzz-visible-secret%26next HTTP/1.1",
        "q=%7B%22secretKey%22%3A%22zz-visible-secret%22%7D",  # JSON, URL-encoded
        "X-Amz-Security-Token%3Dzz-visible-secret%2Fmore",
        f"projected service-account token {JWT} read",
        json.dumps({"token_file": "/var/run/t", "value": JWT}),
        f"key material: {PEM}",
        repr(f"login key {PEM}"),  # newlines escaped
        PEM[:60] + "zz-visible-secret",  # a PEM block cut off (an Event's 1,000 characters)
    ],
)
def test_bytes_reprs_basic_credentials_url_encoded_keys_jwts_and_pem_bodies_are_masked(
    line: str,
) -> None:
    """Issue 46: each of these forms went through the mask unchanged."""
    masked = logmask.mask(line)
    assert "zz-visible-secret" not in masked, masked


def test_basic_credentials_are_masked() -> None:
    """`Basic base64(user:password)`: the run token in a proxy URL travels as this."""
    encoded = base64.b64encode(b"run:zz-visible-secret").decode()
    for line in (
        f"Proxy-Authorization: Basic {encoded}",
        repr({"Authorization": f"Basic {encoded}"}),
    ):
        masked = logmask.mask(line)
        assert encoded not in masked and "Basic ***" in masked, masked


def test_what_looks_like_them_but_is_no_secret_stays() -> None:
    line = "Basic settings apply; a JWT header alone eyJhbGciOi; region%3Dap-guangzhou"
    assert logmask.mask(line) == line
    after = logmask.mask(f"{PEM} then slot 3 of team-a/gpu")
    assert after.endswith("-----END RSA PRIVATE KEY----- then slot 3 of team-a/gpu"), after


def test_condition_and_event_messages_are_masked() -> None:
    """Tenants read them: a cloud error quoted into a condition or an Event carried whatever
    key or token it held (before: written as given)."""
    status = SpotpoolStatus()
    now = datetime(2026, 12, 6, tzinfo=UTC)
    leaked = "the provider said: TENCENTCLOUD_SECRET_KEY=zz-visible-secret; " + JWT
    status = with_condition(status, "Degraded", True, "CloudRejected", leaked, 1, now)
    (condition,) = status.conditions
    assert "zz-visible-secret" not in condition.message
    assert condition.message.startswith("the provider said: TENCENTCLOUD_SECRET_KEY=***")

    class Core:  # the API server's side of create_namespaced_event: what it was sent
        def __init__(self) -> None:
            self.bodies: list[dict[str, Any]] = []

        def create_namespaced_event(self, namespace: str, body: dict[str, Any], **_: Any) -> None:
            self.bodies.append(body)

    core = Core()
    ref = {"apiVersion": "devops.jokerbai.com/v1", "kind": "Spotpool",
           "metadata": {"namespace": "team-a", "name": "gpu", "uid": "u-1"}}  # fmt: skip
    DirectEvents(core).post(ref, "Warning", "CloudRejected", leaked)
    (body,) = core.bodies
    assert "zz-visible-secret" not in body["message"] and "***" in body["message"]
