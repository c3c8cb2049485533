"""No secret reaches a log line: what kopf prints at debug level, masked."""

import json
import logging

import pytest
from spotpool_operator import logmask


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
