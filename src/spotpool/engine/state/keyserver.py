"""The `keyserver` secrets provider: each stack's data key wrapped by a key service on
loopback, so a Pulumi run opens its secrets with one local request instead of deriving the
passphrase key (1,000,000 PBKDF2 rounds: 0.55 CPU-s in every CLI process on a CPU without SHA
extensions).

Pulumi's `hashivault://` provider speaks Vault's transit API (gocloud.dev/secrets/hashivault):
`PUT /v1/transit/encrypt/<key>` and `/decrypt/<key>` with the token in `X-Vault-Token`. This
process serves those two calls on 127.0.0.1 with a random token, under a master key derived
from the passphrase once per process. A stack's settings file then holds
`secretsprovider: hashivault://spotpool` and `encryptedkey: <base64 "vault:v1:...">`; its
secrets are AES-256-GCM under the data key, the format config_crypt.py writes. Anyone with the
passphrase unwraps the same keys (`spotpool stacks keys` serves them for the plain CLI).
"""

import base64
import functools
import hashlib
import hmac
import json
import os
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_NAME = "spotpool"
URL = f"hashivault://{KEY_NAME}"
PREFIX = "vault:v1:"
SALT = b"spotpool keyserver v1"  # one master key per passphrase, whoever derives it
ROUNDS = 1_000_000


class WrongKey(Exception):
    """The wrapped key is not this passphrase's (another install's stack, a changed secret)."""


@functools.lru_cache(maxsize=8)
def master_key(passphrase: str) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", passphrase.encode(), SALT, ROUNDS, 32)


def wrap(master: bytes, plaintext: bytes) -> str:
    nonce = os.urandom(12)
    sealed = AESGCM(master).encrypt(nonce, plaintext, None)
    return PREFIX + base64.b64encode(nonce + sealed).decode()


def unwrap(master: bytes, wrapped: str) -> bytes:
    if not wrapped.startswith(PREFIX):
        raise ValueError(f"not a {PREFIX} ciphertext")
    raw = base64.b64decode(wrapped.removeprefix(PREFIX))
    try:
        return AESGCM(master).decrypt(raw[:12], raw[12:], None)
    except InvalidTag as err:
        raise WrongKey("the passphrase does not unwrap this stack's data key") from err


@functools.lru_cache(maxsize=8)
def process_key(passphrase: str) -> str:
    """One wrapped data key (a settings file's `encryptedkey`) for every stack this process
    creates, as config_crypt.process_salt is for the passphrase provider."""
    return base64.b64encode(wrap(master_key(passphrase), os.urandom(32)).encode()).decode()


def data_key(passphrase: str, encrypted_key: str) -> bytes:
    """The data key of a settings file's `encryptedkey` (what the stack's secrets use)."""
    return unwrap(master_key(passphrase), base64.b64decode(encrypted_key).decode())


class KeyService:
    """Vault's transit encrypt/decrypt for one key, on 127.0.0.1, until `close` (or the
    process ends: its thread is a daemon)."""

    def __init__(self, passphrase: str, port: int = 0) -> None:
        self.token = secrets.token_urlsafe(32)
        token = self.token.encode()

        def master() -> bytes:  # derived on the first request: most processes never ask
            return master_key(passphrase)

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                if not hmac.compare_digest(self.headers.get("X-Vault-Token", "").encode(), token):
                    return self._reply(403, {"errors": ["permission denied"]})
                verb = self.path.split("?")[0].strip("/").split("/")
                try:
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                    if verb == ["v1", "transit", "encrypt", KEY_NAME]:
                        data = {"ciphertext": wrap(master(), base64.b64decode(body["plaintext"]))}
                    elif verb == ["v1", "transit", "decrypt", KEY_NAME]:
                        plain = unwrap(master(), body["ciphertext"])
                        data = {"plaintext": base64.b64encode(plain).decode()}
                    else:
                        return self._reply(404, {"errors": [f"no such path: {self.path}"]})
                except (KeyError, ValueError, TypeError, WrongKey) as error:
                    return self._reply(400, {"errors": [str(error) or type(error).__name__]})
                self._reply(200, {"data": data})

            do_POST = do_PUT

            def _reply(self, code: int, body: dict[str, object]) -> None:
                payload = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                pass  # one line a run would only be noise

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.address = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="keyserver", daemon=True
        )
        self._thread.start()

    def env(self) -> dict[str, str]:
        """What a Pulumi run needs to open a `hashivault://spotpool` stack."""
        return {"VAULT_ADDR": self.address, "VAULT_TOKEN": self.token}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


_services: dict[bytes, KeyService] = {}
_lock = threading.Lock()


def service_for(passphrase: str) -> KeyService:
    """This process's key service for `passphrase`, started on first use (a thread and a
    socket; the key is derived only when a run asks)."""
    with _lock:
        name = hashlib.sha256(passphrase.encode()).digest()
        if name not in _services:
            _services[name] = KeyService(passphrase)
        return _services[name]
