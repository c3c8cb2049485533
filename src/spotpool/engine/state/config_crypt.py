"""Secret config values encrypted as Pulumi's passphrase secrets provider encrypts them, so
setting a stack's config needs no CLI run.

The provider's format (pulumi/sdk `config/crypt.go`, `secrets/passphrase`): a stack's settings
file holds `encryptionsalt: v1:<base64 salt>:<"pulumi" encrypted>`; its key is
PBKDF2-HMAC-SHA256(passphrase, salt, 1,000,000 rounds, 32 bytes); a secret is
`v1:<base64 12-byte nonce>:<base64 AES-256-GCM ciphertext and tag>`. Deriving the key costs
~0.2 CPU-s, once a process per salt here; the CLI pays it again in every run that opens the
stack's secrets. New stacks get the process's own salt (the CLI keeps a salt it finds when it
creates the stack), so the engine derives one key, not one a stack.
"""

import base64
import functools
import hashlib
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

ROUNDS = 1_000_000
CHECK = "pulumi"  # what the salt state carries encrypted, to tell a wrong passphrase


class WrongPassphrase(Exception):
    """The passphrase does not open this salt (another install's stack, or a changed secret)."""


@functools.lru_cache(maxsize=64)
def _key(passphrase: str, salt: bytes) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", passphrase.encode(), salt, ROUNDS, 32)


def encrypt(key: bytes, value: str) -> str:
    nonce = os.urandom(12)
    sealed = AESGCM(key).encrypt(nonce, value.encode(), None)
    return f"v1:{base64.b64encode(nonce).decode()}:{base64.b64encode(sealed).decode()}"


def decrypt(key: bytes, value: str) -> str:
    version, nonce, sealed = value.split(":")
    if version != "v1":
        raise ValueError(f"unknown secret version {version!r}")
    try:
        return AESGCM(key).decrypt(base64.b64decode(nonce), base64.b64decode(sealed), None).decode()
    except InvalidTag as err:
        raise WrongPassphrase("the passphrase does not decrypt this value") from err


def key_for(salt_state: str, passphrase: str) -> bytes:
    """The key of a stack's `encryptionsalt`; WrongPassphrase when it is not this passphrase's."""
    version, salt, check = salt_state.split(":", 2)
    if version != "v1":
        raise ValueError(f"unknown salt version {version!r}")
    key = _key(passphrase, base64.b64decode(salt))
    if decrypt(key, check) != CHECK:
        raise WrongPassphrase("the passphrase does not open this stack's salt")
    return key


@functools.lru_cache(maxsize=8)
def process_salt(passphrase: str) -> str:
    """One salt state for every stack this process creates (its key derived once)."""
    salt = os.urandom(8)
    key = _key(passphrase, salt)
    return f"v1:{base64.b64encode(salt).decode()}:{encrypt(key, CHECK)}"
