"""Secrets never reach a log line, at any level.

kopf logs whole objects and patches at debug level (`operator run -v`): a Spotpool with
inline keys, or the last-handled-configuration annotation kopf keeps of its spec, would print
`secretKey`. The filter masks the value of every secret-named field in every record, however
it is quoted (a dict's repr, JSON, JSON inside a JSON string).
"""

import logging
import re

# Names of secret fields, matched case-insensitively and with any prefix (TENCENTCLOUD_,
# AWS_, X-TC-, WebIdentity, login, spotpool:notice, ...): cloud keys and their tokens
# (TENCENTCLOUD_SECRET_KEY, X-TC-Token, X-Amz-Security-Token, WebIdentityToken), passwords,
# the passphrase, the notice channel's secrets (the agents' SPOTPOOL_NOTICE_TOKEN, a pool's
# noticeKey, the notice secret), the key service's VAULT_TOKEN, client secrets, private keys.
_SECRET_FIELDS = (
    r"secret[_-]?(?:access[_-]?)?key|token|password|passwd|passphrase|notice[_-]?key"
    r"|notice[_-]?secret|private[_-]?key|client[_-]?secret"
)
_KEY = r"(?<![\w-])[\w-]*?(?:" + _SECRET_FIELDS + r")"
_PATTERN = re.compile(
    r"(?P<key>(?:\\*[\"'])?" + _KEY + r"(?:\\*[\"'])?\s*[:=]\s*)"
    r"(?P<quote>\\*[\"'])(?P<value>.*?)(?P=quote)",
    re.IGNORECASE,
)
# Unquoted `NAME=value` or `Name: value` (an environment file's line, a command line's
# `--secret k=v`, a header).
_ASSIGNED = re.compile(
    r"(?P<key>" + _KEY + r"\s*[:=]\s*)(?P<value>[^\s\"',;&}\]()\\]+)", re.IGNORECASE
)
# A URL's password (`http://run:<token>@127.0.0.1:…`), a bearer token.
_USERINFO = re.compile(r"(?P<key>[a-z][a-z0-9+.-]*://[^\s/@:]*:)[^\s/@]+(?=@)", re.IGNORECASE)
_BEARER = re.compile(r"(?P<key>\bBearer\s+)[\w.~+/=-]+", re.IGNORECASE)
MASK = "***"
TENCENT_SDK_LOGGER = "tencentcloud_sdk_common"


_SIGNATURE = re.compile(r"(Signature=)[0-9a-fA-F]+")


def mask(text: str) -> str:
    text = _PATTERN.sub(lambda m: f"{m['key']}{m['quote']}{MASK}{m['quote']}", text)
    text = _ASSIGNED.sub(lambda m: f"{m['key']}{MASK}", text)
    text = _USERINFO.sub(lambda m: f"{m['key']}{MASK}", text)
    text = _BEARER.sub(lambda m: f"{m['key']}{MASK}", text)
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
