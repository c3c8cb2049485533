"""Secrets never reach a log line, at any level, nor a condition or an Event (which tenants read).

kopf logs whole objects and patches at debug level (`operator run -v`): a Spotpool with
inline keys, or the last-handled-configuration annotation kopf keeps of its spec, would print
`secretKey`. The filter masks the value of every secret-named field in every record, however
it is quoted (a dict's repr, JSON, JSON inside a JSON string, a bytes repr, a `(name, value)`
pair, URL-encoded), and whatever needs no name to be a secret: `Bearer`/`Basic` credentials, a
URL's password, a request signature, a JWT, the body of a PEM block. `mask` is also applied to
every condition message (conditions.py) and Event message (events.py): a cloud error or an
engine's output quoted there must not carry a key either.
"""

import base64
import binascii
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
    r"(?P<key>(?:\\*[\"'])?" + _KEY + r"(?:\\*[\"'])?\s*[:=]\s*b?)"
    r"(?P<quote>\\*[\"'])(?P<value>.*?)(?P=quote)",
    re.IGNORECASE,
)
# A `(name, value)` pair, as a list of headers prints: `('X-TC-Token', 'v')`, `(b'...', b'...')`.
_PAIR = re.compile(
    r"(?P<key>b?(?P<kq>\\*[\"'])" + _KEY + r"(?P=kq)\s*,\s*b?)"
    r"(?P<quote>\\*[\"'])(?P<value>.*?)(?P=quote)",
    re.IGNORECASE,
)
# URL-encoded: `secretKey%3Dv`, `%22secretKey%22%3A%22v%22` (a form, or JSON in a query).
_ENCODED = re.compile(
    r"(?P<key>" + _KEY + r"(?:%2[27])?(?:%3[AD]|=)(?:%20|\+)*(?:%2[27])?)"
    r"(?P<value>(?:[^\s%&\"',;]|%(?!2[27C]|26)[0-9A-F]{2})+)",
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
# `Basic <base64 of user:password>` (Proxy-Authorization: the run token is the password).
_BASIC = re.compile(r"(?P<key>\bBasic\s+)(?P<value>[A-Za-z0-9+/]{4,}={0,2})", re.IGNORECASE)
# A JSON Web Token (a service-account or web-identity token): three base64url parts.
_JWT = re.compile(r"\beyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]*")
# The body of a PEM block (a private key), up to its end line or the end of the text.
_PEM = re.compile(
    r"(?P<begin>-----BEGIN [A-Z0-9 ]+-----).*?(?P<end>-----END [A-Z0-9 ]+-----|\Z)", re.DOTALL
)
MASK = "***"
TENCENT_SDK_LOGGER = "tencentcloud_sdk_common"


_SIGNATURE = re.compile(r"(Signature=)[0-9a-fA-F]+")


def mask(text: str) -> str:
    text = _PEM.sub(lambda m: f"{m['begin']}{MASK}{m['end']}", text)
    text = _JWT.sub(MASK, text)
    text = _PATTERN.sub(lambda m: f"{m['key']}{m['quote']}{MASK}{m['quote']}", text)
    text = _PAIR.sub(lambda m: f"{m['key']}{m['quote']}{MASK}{m['quote']}", text)
    text = _ENCODED.sub(lambda m: f"{m['key']}{MASK}", text)
    text = _ASSIGNED.sub(lambda m: f"{m['key']}{MASK}", text)
    text = _USERINFO.sub(lambda m: f"{m['key']}{MASK}", text)
    text = _BEARER.sub(lambda m: f"{m['key']}{MASK}", text)
    text = _BASIC.sub(_basic, text)
    return _SIGNATURE.sub(rf"\g<1>{MASK}", text)


def _basic(found: re.Match[str]) -> str:
    """Masked when it is a credential (base64 of `user:password`), not a word after "Basic"."""
    try:
        credential = b":" in base64.b64decode(found["value"], validate=True)
    except (binascii.Error, ValueError):
        credential = False
    return f"{found['key']}{MASK}" if credential else found[0]


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
