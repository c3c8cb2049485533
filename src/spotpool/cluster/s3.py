"""A local S3 server for the shared-backend tests and benchmarks: versitygw (built from the Go
module proxy into the toolchain) serving a directory on 127.0.0.1, with one bucket.

`backend_url` is what Pulumi (and the operator's `--backend`) takes; `env` is what it needs
beside it. A real deployment points the same URL shape at Tencent COS (see docs/deploy.md).
"""

import os
import secrets
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from spotpool.ports import free_port
from spotpool.toolchain.paths import bin_dir

REGION = "us-east-1"


@dataclass
class LocalS3:
    directory: Path
    port: int
    access_key: str
    secret_key: str
    process: subprocess.Popen[bytes]
    bucket: str = "spotpool-state"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def backend_url(self) -> str:
        return f"s3://{self.bucket}?endpoint={self.endpoint}&use_path_style=true&region={REGION}"

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": REGION,
        }

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start(directory: Path, log: Path | None = None, timeout: float = 20.0) -> LocalS3:
    """Serve `directory` over S3 on a free loopback port, with the bucket made; stop() ends it."""
    binary = bin_dir() / "versitygw"
    if not binary.exists():
        raise FileNotFoundError(f"no versitygw at {binary}: run `spotpool toolchain install`")
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    access, secret = "spotpool" + secrets.token_hex(4), secrets.token_hex(16)
    env = {**os.environ, "ROOT_ACCESS_KEY": access, "ROOT_SECRET_KEY": secret}
    output = (log or directory.parent / "versitygw.log").open("ab")
    process = subprocess.Popen(
        [str(binary), "--port", f"127.0.0.1:{port}", "posix", str(directory)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=output,
        stderr=output,
    )
    server = LocalS3(directory, port, access, secret, process)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"versitygw exited with {process.returncode}: see {output.name}")
        try:
            urllib.request.urlopen(server.endpoint, timeout=1)
            break
        except urllib.error.HTTPError:
            break  # it answers (403 without a signature): it is up
        except OSError:
            if time.monotonic() > deadline:
                server.stop()
                raise TimeoutError(f"versitygw did not listen on {server.endpoint}") from None
            time.sleep(0.1)
    (directory / server.bucket).mkdir(exist_ok=True)  # a posix bucket is a directory
    return server
