"""The default notice secret is stretched (issue 41, item 4): derived from the passphrase by
HKDF over its PBKDF2 stretch, so a notice token (readable from an instance's user data) lets
no one test passphrase guesses faster than against the state — before, it was one SHA-256."""

import hashlib
from pathlib import Path

import pytest
from pydantic import SecretStr

from spotpool.api.notices import pool_key
from spotpool.engine.basics import settings as engine_settings
from spotpool.engine.basics.settings import EngineSettings

pytestmark = pytest.mark.unit


def _settings(tmp_path: Path, passphrase: str) -> EngineSettings:
    return EngineSettings(
        backend_url=f"file://{tmp_path}", passphrase=SecretStr(passphrase), work_root=tmp_path
    )


def test_the_default_notice_key_is_not_one_hash_of_the_passphrase(tmp_path: Path) -> None:
    passphrase = "a-passphrase-of-the-tests-1"
    key = _settings(tmp_path, passphrase).notice_key("uid-1")
    one_hash = hashlib.sha256(b"spotpool-notices:" + passphrase.encode()).digest()
    assert key != pool_key(one_hash, "uid-1")
    stretched = hashlib.pbkdf2_hmac(
        "sha256", passphrase.encode(), b"spotpool-notices/v2/pbkdf2", 1_000_000
    )
    secret = engine_settings.hkdf_sha256(stretched, b"spotpool-notices/v2/notice-secret")
    assert key == pool_key(secret, "uid-1")  # a guess costs 1,000,000 rounds of HMAC-SHA256


def test_hkdf_matches_rfc5869_case_1() -> None:
    ikm = bytes.fromhex("0b" * 22)
    salt = bytes.fromhex("000102030405060708090a0b0c")
    info = bytes.fromhex("f0f1f2f3f4f5f6f7f8f9")
    okm = engine_settings.hkdf_sha256(ikm, info, 42, salt)
    assert okm.hex() == (
        "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
    )


@pytest.mark.parametrize("weak", ["", "x", "fifteen-chars-x", "abababababababababab"])
def test_weak_passphrases_are_named_weak(weak: str) -> None:
    assert engine_settings.weak_passphrase(weak) is not None
    assert engine_settings.weak_passphrase("k3J9-qLz8_wPx2Rt") is None
