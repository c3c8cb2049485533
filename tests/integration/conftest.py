"""A real emulator process on loopback, and official Tencent Cloud SDK clients pointed at it."""

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tencentcloud.common import credential
from tencentcloud.common.profile.client_profile import ClientProfile
from tencentcloud.common.profile.http_profile import HttpProfile
from tencentcloud.cvm.v20170312 import cvm_client

REGION = "ap-singapore"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Emulator:
    """One `spotpool emulator serve` process; stopped by its own pid only."""

    state: Path
    log: Path
    boot_seconds: float = 1.0
    secret_id: str = field(default_factory=lambda: "AKID" + secrets.token_hex(16))
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {"TENCENTCLOUD_SECRET_ID": self.secret_id, "TENCENTCLOUD_SECRET_KEY": self.secret_key}
        command = [
            sys.executable, "-m", "spotpool", "emulator", "serve", "--port", str(self.port),
            "--state", str(self.state), "--boot-seconds", str(self.boot_seconds),
        ]  # fmt: skip
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                command, env={**_base_env(), **env}, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 20
        while True:
            try:
                self.admin("GET", "health")
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    pytest.fail(f"the emulator did not start:\n{self.log.read_text()}")
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def admin(self, method: str, route: str, body: Any = None) -> Any:
        """Call an admin route; HTTP errors come back as {"status": ..., "Error": ...}."""
        request = urllib.request.Request(
            f"{self.endpoint}/_emulator/{route}",
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method=method,
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            return {"status": error.code, **json.load(error)}

    def cvm(self, secret_key: str | None = None, region: str = REGION) -> cvm_client.CvmClient:
        profile = ClientProfile(
            httpProfile=HttpProfile(endpoint=f"127.0.0.1:{self.port}", protocol="http")
        )
        cred = credential.Credential(self.secret_id, secret_key or self.secret_key)
        return cvm_client.CvmClient(cred, region, profile)


def _base_env() -> dict[str, str]:
    # No proxy settings leak in: the SDK must reach 127.0.0.1 directly.
    return {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    server = Emulator(state=tmp_path / "cloud.db", log=tmp_path / "emulator.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()
