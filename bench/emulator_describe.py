"""DescribeInstances over 1,000 instances: requests per second and latency, as the SDK sees it.

Starts its own emulator on loopback (boot delay 0), creates 1,000 spot instances, then for
three workloads sends a bounded number of signed DescribeInstances calls from several SDK
client processes, and prints throughput, p50/p99 latency and the server's peak memory:
`by-id` (one instance by id: the provider's read/refresh), `pool` (100 instances by tag) and
`pages` (pages of 100 over the whole cloud). Target: at least 500 requests/s on the project's
2-core machine. With 100 instances a reply (about 140 KB), the SDK's own parsing of the reply
is the limit, not the server.

    .venv/bin/python bench/emulator_describe.py [--requests 4000] [--clients 3]
"""

import argparse
import json
import multiprocessing
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tencentcloud.common import credential
from tencentcloud.common.profile.client_profile import ClientProfile
from tencentcloud.common.profile.http_profile import HttpProfile
from tencentcloud.cvm.v20170312 import cvm_client, models

INSTANCES = 1000
REGION = "ap-singapore"


def _client(port: int, secret_id: str, secret_key: str) -> cvm_client.CvmClient:
    profile = ClientProfile(httpProfile=HttpProfile(endpoint=f"127.0.0.1:{port}", protocol="http"))
    return cvm_client.CvmClient(credential.Credential(secret_id, secret_key), REGION, profile)


def _create(client: cvm_client.CvmClient) -> list[str]:
    ids: list[str] = []
    for batch in range(INSTANCES // 100):
        request = models.RunInstancesRequest()
        request.from_json_string(
            json.dumps(
                {
                    "Placement": {"Zone": f"ap-singapore-{batch % 4 + 1}"},
                    "ImageId": "img-eb30mz89",
                    "InstanceType": "GN7.2XLARGE32",
                    "InstanceCount": 100,
                    "InstanceChargeType": "SPOTPAID",
                    "TagSpecification": [
                        {
                            "ResourceType": "instance",
                            "Tags": [{"Key": "pool", "Value": f"p{batch}"}],
                        }
                    ],
                }
            )
        )
        ids += client.RunInstances(request).InstanceIdSet
    return ids


def _bodies(workload: str, ids: list[str], n: int) -> dict[str, object]:
    if workload == "by-id":  # what the provider's read and refresh send: one instance
        return {"InstanceIds": [ids[n * 7919 % len(ids)]]}
    if workload == "pool":  # what a pool listing sends: one pool's 100 instances by tag
        return {"Filters": [{"Name": "tag:pool", "Values": [f"p{n % 10}"]}], "Limit": 100}
    return {"Offset": n * 100 % INSTANCES, "Limit": 100}  # "pages": the whole cloud


def _worker(args: tuple[int, str, str, str, list[str], int]) -> list[float]:
    """Send `count` DescribeInstances calls through the SDK; return each latency in seconds."""
    port, secret_id, secret_key, workload, ids, count = args
    client = _client(port, secret_id, secret_key)
    latencies = []
    for n in range(count):
        request = models.DescribeInstancesRequest()
        request.from_json_string(json.dumps(_bodies(workload, ids, n)))
        started = time.perf_counter()
        response = client.DescribeInstances(request)
        latencies.append(time.perf_counter() - started)
        assert response.TotalCount and response.InstanceSet
    return latencies


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--clients", type=int, default=3)
    options = parser.parse_args()

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    secret_id, secret_key = "AKID" + secrets.token_hex(16), secrets.token_urlsafe(24)
    workdir = Path(tempfile.mkdtemp(prefix="spotpool-bench-"))
    env = {**os.environ, "TENCENTCLOUD_SECRET_ID": secret_id, "TENCENTCLOUD_SECRET_KEY": secret_key}
    with (workdir / "emulator.log").open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "spotpool", "emulator", "serve", "--port", str(port),
             "--state", str(workdir / "cloud.db"), "--boot-seconds", "0"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/_emulator/health", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the emulator did not start") from None
                time.sleep(0.05)
        started = time.perf_counter()
        ids = _create(_client(port, secret_id, secret_key))
        print(f"{INSTANCES} spot instances created in {time.perf_counter() - started:.2f} s")
        print(f"{options.clients} SDK client processes, {options.requests} calls per workload")
        print("workload   requests/s   p50 ms   p99 ms   max ms   server CPU ms/request")
        for workload in ("by-id", "pool", "pages"):
            per_client = options.requests // options.clients
            job = (port, secret_id, secret_key, workload, ids, per_client)
            with multiprocessing.Pool(options.clients) as pool:
                cpu_before = _cpu_seconds(server.pid)
                started = time.perf_counter()
                latencies = sorted(
                    x for batch in pool.map(_worker, [job] * options.clients) for x in batch
                )
                elapsed = time.perf_counter() - started
                cpu = _cpu_seconds(server.pid) - cpu_before
            p50, p99 = statistics.median(latencies), latencies[int(len(latencies) * 0.99) - 1]
            rate = len(latencies) / elapsed
            print(
                f"{workload:8} {rate:12.0f} {p50 * 1000:8.1f} {p99 * 1000:8.1f}"
                f" {latencies[-1] * 1000:8.1f} {cpu / len(latencies) * 1000:12.2f}"
            )
        print("target: >= 500 requests/s; by-id is what the provider's read and refresh send")
        print(f"server peak RSS: {_peak_rss_mib(server.pid):.0f} MiB")
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
