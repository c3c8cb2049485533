"""A real Prometheus of the local world: scrapes the operator's /metrics on loopback and answers
PromQL over its HTTP API, so the dashboard's queries can be evaluated as Grafana would send them.

Started from the pinned toolchain's binary on a free loopback port, its TSDB in a directory of
the caller's, stopped by its own pid.
"""

import json
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from spotpool.localworld.emulator import wait_until
from spotpool.ports import free_port
from spotpool.toolchain.manifest import TOOLS_BY_NAME
from spotpool.toolchain.paths import bin_dir


@dataclass
class PrometheusProcess:
    process: subprocess.Popen[bytes]
    url: str

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector (or scalar as a one-item list)."""
        params = urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{params}", timeout=10) as reply:
            body = json.loads(reply.read())
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus refused {expr!r}: {body}")
        data = body["data"]
        return list(data["result"]) if data["resultType"] in ("vector", "matrix") else [data]

    def targets_up(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=10) as reply:
            active = json.loads(reply.read())["data"]["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start(directory: Path, targets: list[str], interval: str = "1s") -> PrometheusProcess:
    """Prometheus scraping `targets` (host:port of /metrics endpoints) every `interval`."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": interval, "evaluation_interval": interval},
                "scrape_configs": [
                    {"job_name": "spotpool", "static_configs": [{"targets": targets}]}
                ],
            }
        )
    )
    port = free_port()
    binary = bin_dir() / TOOLS_BY_NAME["prometheus"].binary
    with (directory / "prometheus.log").open("wb") as log:
        process = subprocess.Popen(
            [
                str(binary),
                f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = PrometheusProcess(process, f"http://127.0.0.1:{port}")

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"prometheus exited: see {directory / 'prometheus.log'}")
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            time.sleep(0.2)
            return False

    try:
        wait_until(ready, "Prometheus ready", timeout=60)
    except BaseException:
        server.stop()
        raise
    return server
