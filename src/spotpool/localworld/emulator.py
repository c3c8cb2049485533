"""A real emulator process and official SDK clients pointed at it: the cloud of the local world.

The emulator is driven only over HTTP, as the operator and the provider drive it: the
process is started from the installed `spotpool` entry point, on a free loopback port, with
its state in a SQLite file, and is stopped by its own pid.
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tencentcloud.common import credential
from tencentcloud.common.common_client import CommonClient
from tencentcloud.common.profile.client_profile import ClientProfile
from tencentcloud.common.profile.http_profile import HttpProfile
from tencentcloud.cvm.v20170312 import cvm_client

from spotpool.ports import free_port

SPOTPOOL = Path(sys.executable).parent / "spotpool"
REGION = "ap-guangzhou"
ZONE = "ap-guangzhou-3"
OTHER_ZONE = "ap-guangzhou-4"
IMAGE_ID = "img-487zeit5"
INSTANCE_TYPE = "S5.MEDIUM2"
SECRET_ID = "AKIDspotpoolTESTS00000000000000000000"
SECRET_KEY = "spotpool-tests-secret-key"
READY_TIMEOUT = 20.0

T = TypeVar("T")


def wait_until(
    probe: Callable[[], T | None], what: str, timeout: float = 10.0, every: float = 0.1
) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


@dataclass
class EmulatorProcess:
    """One running `spotpool emulator serve` and the ways to talk to it."""

    port: int
    state: Path
    log: Path
    process: subprocess.Popen[bytes]
    secret_id: str = SECRET_ID
    secret_key: str = SECRET_KEY

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- the cloud API, through the official SDK -------------------------------------------
    def _profile(self) -> Any:
        http = HttpProfile(endpoint=f"127.0.0.1:{self.port}", protocol="http", reqTimeout=10)
        return ClientProfile(httpProfile=http)

    def cvm(
        self, secret_key: str | None = None, secret_id: str | None = None, region: str = REGION
    ) -> Any:
        """A `CvmClient` exactly as a user would build one, only the endpoint changed."""
        cred = credential.Credential(secret_id or self.secret_id, secret_key or self.secret_key)
        return cvm_client.CvmClient(cred, region, self._profile())

    def common(self, service: str, version: str, region: str = REGION) -> Any:
        """The SDK's generic client, for services whose SDK package is not installed."""
        cred = credential.Credential(self.secret_id, self.secret_key)
        return CommonClient(service, version, cred, region, self._profile())

    # -- the admin routes (plain JSON, no signature) ---------------------------------------
    def admin(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.endpoint + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)

    def admin_ok(self, method: str, path: str, body: object = None) -> Any:
        status, reply = self.admin(method, path, body)
        assert status == 200, f"{method} {path} answered {status}: {reply}"
        return reply

    def all_instances(self) -> list[dict[str, Any]]:
        """Everything the emulator holds, terminated and reclaimed included."""
        instances: list[dict[str, Any]] = self.admin_ok("GET", "/_emulator/instances")["Instances"]
        return instances

    def lost_answers(self) -> dict[str, int]:
        """Action -> answers the emulator dropped after the call took effect (misbehaviour)."""
        said = self.admin_ok("GET", "/_emulator/misbehaviour")["Counters"]["LostAnswers"]
        return {action: int(lost["Count"]) for action, lost in said.items()}

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def actions(self) -> list[str]:
        """`service.Action` of every API call served so far, in order."""
        return re.findall(r"\baction=(\S+) ", self.log_text())

    # -- life ------------------------------------------------------------------------------
    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint + "/_emulator/health", timeout=1) as reply:
                return reply.status == 200 and json.load(reply).get("ok") is True
        except (OSError, ValueError):
            return False

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.process.poll() is not None:
                raise AssertionError(
                    f"the emulator exited with {self.process.returncode} before it was ready:\n"
                    + self.log_text()
                )
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(
                    f"the emulator was not healthy within {timeout:.0f} s:\n" + self.log_text()
                )
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop this process (and only it), by its pid: SIGTERM, then SIGKILL if it hangs."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        stop_orphaned_plugins(self.endpoint)


def stop_orphaned_plugins(endpoint: str) -> list[int]:
    """Stop provider plugins a SIGKILLed Pulumi run left behind for this emulator.

    Pulumi starts each plugin in a process group of its own, so killing a run's group leaves
    its plugins running, adopted by init. Ours are recognised by the emulator they were sent
    to (HTTP_PROXY in their environment): only processes our own tests started.
    """
    stopped = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == 1 and f"HTTP_PROXY={endpoint}".encode() in environ:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)
                stopped.append(int(proc.name))
    return stopped


def start_emulator(
    state: Path,
    log: Path,
    boot_seconds: float = 1.0,
    reclaim_rate: float = 0.0,
    reclaim_notice_seconds: float = 0.0,
    secret_id: str = SECRET_ID,
    secret_key: str = SECRET_KEY,
    extra_args: list[str] | None = None,
) -> EmulatorProcess:
    """Start `spotpool emulator serve` on a free loopback port and wait until it is healthy
    (`extra_args`: more options, e.g. --reclaim-rates, --spot-prices, --seed)."""
    port = free_port()
    # The key goes through the environment, as the CLI recommends: argv is visible to `ps`.
    env = {**os.environ, "TENCENTCLOUD_SECRET_KEY": secret_key}
    with log.open("ab") as log_file:
        process = subprocess.Popen(
            [
                str(SPOTPOOL),
                "emulator",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--state",
                str(state),
                "--secret-id",
                secret_id,
                "--boot-seconds",
                str(boot_seconds),
                "--reclaim-rate",
                str(reclaim_rate),
                "--reclaim-notice-seconds",
                str(reclaim_notice_seconds),
                *(extra_args or []),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            env=env,
        )
    emulator = EmulatorProcess(
        port=port, state=state, log=log, process=process, secret_id=secret_id,
        secret_key=secret_key,
    )  # fmt: skip
    emulator.wait_ready()
    return emulator
