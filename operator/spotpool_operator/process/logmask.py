"""Secrets never reach a log line, at any level.

kopf logs whole objects and patches at debug level (`operator run -v`): a Spotpool with
inline keys, or the last-handled-configuration annotation kopf keeps of its spec, would print
`secretKey`. The filter masks the value of every secret-named field in every record, however
it is quoted (a dict's repr, JSON, JSON inside a JSON string).
"""

import logging
import re

# The notice channel's secrets too: the agents' slot token (its env-file line), a pool's notice
# key (the stack's `spotpool:noticeKey`) and the operator's notice secret; the key service's
# token (engine/state/keyserver.py), which Pulumi runs get as VAULT_TOKEN.
_SECRET_FIELDS = (
    r"secretKey|SecretKey|secret_key|password|Password|loginPassword|passphrase"
    r"|PULUMI_CONFIG_PASSPHRASE|SPOTPOOL_NOTICE_TOKEN|noticeKey|notice_key|noticeSecret"
    r"|notice_secret|noticeToken|notice_token|VAULT_TOKEN|X-Vault-Token"
)
_PATTERN = re.compile(
    r"(?P<key>(?:\\*[\"'])?(?:" + _SECRET_FIELDS + r")(?:\\*[\"'])?\s*[:=]\s*)"
    r"(?P<quote>\\*[\"'])(?P<value>.*?)(?P=quote)"
)
# Unquoted `NAME=value` (an environment file's line, a command line's `--secret k=v`).
_ASSIGNED = re.compile(
    r"(?P<key>\b(?:" + _SECRET_FIELDS + r")\s*=\s*)(?P<value>[^\s\"',;&}\]()\\]+)"
)
MASK = "***"
TENCENT_SDK_LOGGER = "tencentcloud_sdk_common"


_SIGNATURE = re.compile(r"(Signature=)[0-9a-fA-F]+")


def mask(text: str) -> str:
    text = _PATTERN.sub(lambda m: f"{m['key']}{m['quote']}{MASK}{m['quote']}", text)
    text = _ASSIGNED.sub(lambda m: f"{m['key']}{MASK}", text)
    return _SIGNATURE.sub(rf"\g<1>{MASK}", text)


class SecretMask(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


def install() -> None:
    """Mask on every handler of the root logger (kopf's and ours). The Tencent Cloud SDK logs
    every request and reply at debug level (signed headers, whole fleets of instances a
    second): it says only warnings, whatever the level."""
    logging.getLogger(TENCENT_SDK_LOGGER).setLevel(logging.WARNING)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, SecretMask) for f in handler.filters):
            handler.addFilter(SecretMask())
