"""No secret reaches a log line: what kopf prints at debug level, masked."""

import json
import logging

import pytest
from spotpool_operator.process import logmask

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
