"""Benchmark: DescribeInstances over 1,000 instances — requests/s, p50/p99 latency, server RSS.

Issue 3 asks for at least 500 requests/s. The operator's refresh and the provider's reads are
DescribeInstances calls, so this is the emulator's hot path. The bench starts its own emulator
on loopback (boot delay 0, state in a temporary directory), creates the instances with
RunInstances in batches of 100, sends a bounded number of DescribeInstances calls (pages of
100: a quarter each plain, by state, by tag and by zone), prints what the clients measured and
the server's peak RSS, and stops the server by its pid.

Two kinds of client, because on a 2-core machine the client's own CPU decides the figure:

- `--client wire` (default): every request is built and TC3-signed by the official SDK's own
  request builder (the exact bytes `CvmClient` would send), then sent over keep-alive
  connections from one asyncio process. Cheap on the client, so it measures the server.
- `--client sdk`: `CvmClient.DescribeInstances` end to end in a few processes, replies
  parsed into SDK models — what a Python SDK program sees; the SDK spends ~15 ms of CPU per
  100-instance page, so on 2 cores this measures the SDK more than the emulator.

    .venv/bin/python bench/emulator_describe_sdk.py [--client wire|sdk] [--requests 3000]
"""

import argparse
import asyncio
import json
import math
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from multiprocessing import queues, synchronize
from pathlib import Path
from typing import Any

import aiohttp
from tencentcloud.common import credential
from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException
from tencentcloud.common.http.request import RequestInternal
from tencentcloud.common.profile.client_profile import ClientProfile
from tencentcloud.common.profile.http_profile import HttpProfile
from tencentcloud.cvm.v20170312 import cvm_client, models

SPOTPOOL = Path(sys.executable).parent / "spotpool"
SECRET_ID = "AKIDspotpoolBENCH000000000000000000000"
SECRET_KEY = "spotpool-bench-secret-key"
REGION = "ap-guangzhou"
ZONES = ["ap-guangzhou-3", "ap-guangzhou-4"]
POOLS = 5
PAGE = 100
TARGET_RPS = 500.0
CHECK_EVERY = 25  # the wire client parses one reply in this many in full (the rest: no Error)

# What one client reports: latencies (s), errors, first send and last reply (monotonic, s).
Report = tuple[list[float], list[str], float, float]


def _client(port: int) -> Any:
    http = HttpProfile(endpoint=f"127.0.0.1:{port}", protocol="http", reqTimeout=30)
    http.keepAlive = True
    return cvm_client.CvmClient(
        credential.Credential(SECRET_ID, SECRET_KEY), REGION, ClientProfile(httpProfile=http)
    )


def _request(model: Any, body: dict[str, Any]) -> Any:
    request = model()
    request.from_json_string(json.dumps(body))
    return request


# -- the server --------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start_server(workdir: Path, port: int) -> subprocess.Popen[bytes]:
    """`spotpool emulator serve` on loopback, healthy, or SystemExit with its log."""
    log = workdir / "emulator.log"
    with log.open("wb") as log_file:
        server = subprocess.Popen(
            [
                str(SPOTPOOL),
                "emulator",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--state",
                str(workdir / "cloud.db"),
                "--secret-id",
                SECRET_ID,
                "--boot-seconds",
                "0",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            env={**os.environ, "TENCENTCLOUD_SECRET_KEY": SECRET_KEY},
        )
    deadline = time.monotonic() + 20
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_emulator/health", timeout=1):
                return server
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                _stop_server(server)
                raise SystemExit(
                    "the emulator did not become healthy:\n" + log.read_text()
                ) from None
            time.sleep(0.05)


def _stop_server(server: subprocess.Popen[bytes]) -> None:
    """Stop the server we started, by its pid: SIGTERM, then SIGKILL if it hangs."""
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time the process has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mib(pid: int) -> float:
    """The process's high-water resident set (VmHWM) from /proc, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return math.nan


# -- the cloud and the calls -------------------------------------------------------------------
def _create(port: int, instances: int) -> None:
    """Spot instances in batches of 100, spread over zones and pools (tags) for the filters."""
    client = _client(port)
    for batch, start in enumerate(range(0, instances, 100)):
        body = {
            "InstanceChargeType": "SPOTPAID",
            "InstanceMarketOptions": {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time", "MaxPrice": "1.5"},
            },
            "Placement": {"Zone": ZONES[batch % len(ZONES)]},
            "ImageId": "img-eb30mz89",
            "InstanceType": "GN7.2XLARGE32",
            "InstanceCount": min(100, instances - start),
            "VirtualPrivateCloud": {"VpcId": "DEFAULT", "SubnetId": "DEFAULT"},
            "InternetAccessible": {"InternetMaxBandwidthOut": 10, "PublicIpAssigned": True},
            "TagSpecification": [
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": "pool", "Value": f"p{batch % POOLS}"}],
                }
            ],
        }
        client.RunInstances(_request(models.RunInstancesRequest, body))


def _describe_body(n: int, instances: int) -> dict[str, Any]:
    """The n-th call's parameters: plain pages, and pages filtered by state, tag and zone."""
    match n % 4:
        case 0:
            return {"Offset": n * PAGE % max(instances, 1), "Limit": PAGE}
        case 1:
            filters = [{"Name": "instance-state", "Values": ["RUNNING"]}]
        case 2:
            filters = [{"Name": "tag:pool", "Values": [f"p{n % POOLS}"]}]
        case _:
            filters = [{"Name": "zone", "Values": [ZONES[n % len(ZONES)]]}]
    return {"Filters": filters, "Offset": 0, "Limit": PAGE}


def _page_problem(reply: dict[str, Any]) -> str | None:
    """What is wrong with a parsed DescribeInstances reply (error, empty page), if anything."""
    response = reply.get("Response", {})
    if "Error" in response:
        return str(response["Error"]["Code"])
    if not response.get("TotalCount") or not 0 < len(response.get("InstanceSet") or []) <= PAGE:
        return f"unexpected page: TotalCount {response.get('TotalCount')}"
    return None


# -- client: the SDK's signed bytes over aiohttp -----------------------------------------------
async def _wire_clients(
    port: int, instances: int, requests: int, concurrency: int, seconds: float
) -> Report:
    """`concurrency` tasks share one keep-alive session; each request is signed by the SDK."""
    signer = _client(port)
    url = f"http://127.0.0.1:{port}/"
    latencies: list[float] = []
    errors: list[str] = []
    numbers = iter(range(requests))

    def signed(n: int) -> tuple[dict[str, str], bytes]:
        request = RequestInternal(f"127.0.0.1:{port}", "POST", "/")
        signer._build_req_inter("DescribeInstances", _describe_body(n, instances), request)
        return dict(request.header), str(request.data).encode()

    async def one(session: aiohttp.ClientSession, n: int) -> None:
        headers, data = signed(n)  # signed when sent: the timestamp is part of the signature
        sent = time.perf_counter()
        async with session.post(url, data=data, headers=headers) as response:
            body = await response.read()
        latencies.append(time.perf_counter() - sent)
        if response.status != 200 or b'"Error"' in body[:40]:
            errors.append(body[:300].decode(errors="replace"))
        elif n % CHECK_EVERY == 0 and (problem := _page_problem(json.loads(body))):
            errors.append(problem)

    async def worker(session: aiohttp.ClientSession, deadline: float) -> None:
        for n in numbers:
            if time.monotonic() > deadline:
                return
            await one(session, n)

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(one(session, -1 - c) for c in range(concurrency)))  # warm up
        latencies.clear()
        began = time.monotonic()
        await asyncio.gather(*(worker(session, began + seconds) for _ in range(concurrency)))
        return latencies, errors, began, time.monotonic()


# -- client: the SDK end to end, in processes --------------------------------------------------
def _sdk_process(
    port: int,
    first: int,
    count: int,
    instances: int,
    seconds: float,
    barrier: synchronize.Barrier,
    results: "queues.Queue[Report]",
) -> None:
    """Send calls `first`..`first+count` (for at most `seconds`) and report their latencies."""
    client = _client(port)
    latencies: list[float] = []
    errors: list[str] = []
    client.DescribeInstances(_request(models.DescribeInstancesRequest, {"Limit": 1}))  # warm up
    barrier.wait()
    began = time.monotonic()
    for n in range(first, first + count):
        if time.monotonic() - began > seconds:
            break
        request = _request(models.DescribeInstancesRequest, _describe_body(n, instances))
        sent = time.perf_counter()
        try:
            reply = client.DescribeInstances(request)
        except TencentCloudSDKException as error:
            errors.append(str(error.code))
            continue
        finally:
            latencies.append(time.perf_counter() - sent)
        if problem := _page_problem({"Response": json.loads(reply.to_json_string())}):
            errors.append(problem)
    results.put((latencies, errors, began, time.monotonic()))


def _sdk_clients(
    port: int, instances: int, requests: int, processes: int, seconds: float
) -> Report:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes + 1)
    results: queues.Queue[Report] = context.Queue()
    share = math.ceil(requests / processes)
    started = [
        context.Process(
            target=_sdk_process,
            args=(
                port,
                p * share,
                max(0, min(share, requests - p * share)),
                instances,
                seconds,
                barrier,
                results,
            ),
        )
        for p in range(processes)
    ]
    for process in started:
        process.start()
    barrier.wait(timeout=60)  # spawning and warm-up are not timed
    reports = [results.get(timeout=seconds + 120) for _ in started]
    for process in started:
        process.join(timeout=30)
    return (
        [x for r in reports for x in r[0]],
        [e for r in reports for e in r[1]],
        min(r[2] for r in reports),
        max(r[3] for r in reports),
    )


# -- the figures -------------------------------------------------------------------------------
def _percentile(ordered: list[float], share: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _print_report(report: Report, what: str) -> None:
    latencies, errors, began, finished = report
    latencies = sorted(latencies)
    elapsed = finished - began
    print(f"clients       {what}")
    print(f"requests      {len(latencies)} in {elapsed:.2f} s, errors {len(errors)}")
    print(f"throughput    {len(latencies) / elapsed:.0f} requests/s (target >= {TARGET_RPS:.0f})")
    print(
        f"latency       p50 {_percentile(latencies, 0.50) * 1000:.1f} ms, "
        f"p99 {_percentile(latencies, 0.99) * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--client", choices=["wire", "sdk"], default="wire")
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=3000, help="DescribeInstances calls")
    parser.add_argument(
        "--concurrency", type=int, default=0, help="in flight (default: wire 8, sdk 3 processes)"
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="stop sending after this")
    options = parser.parse_args()
    concurrency = options.concurrency or (8 if options.client == "wire" else 3)

    with tempfile.TemporaryDirectory(prefix="spotpool-bench-") as workdir:
        port = _free_port()
        server = _start_server(Path(workdir), port)
        try:
            began = time.perf_counter()
            _create(port, options.instances)
            created_in = time.perf_counter() - began
            print(f"instances     {options.instances}, created in {created_in:.2f} s")
            print(f"calls         DescribeInstances, Limit {PAGE}, 3 of 4 filtered")
            cpu_before = _cpu_seconds(server.pid)
            if options.client == "wire":
                report = asyncio.run(
                    _wire_clients(
                        port, options.instances, options.requests, concurrency, options.seconds
                    )
                )
                what = f"{concurrency} in flight, SDK-signed requests over aiohttp (1 process)"
            else:
                report = _sdk_clients(
                    port, options.instances, options.requests, concurrency, options.seconds
                )
                what = f"{concurrency} processes, CvmClient.DescribeInstances end to end"
            server_cpu = _cpu_seconds(server.pid) - cpu_before
            _print_report(report, what)
            calls = len(report[0])
            print(
                f"server        peak RSS {_peak_rss_mib(server.pid):.0f} MiB, "
                f"CPU {server_cpu * 1000 / max(calls, 1):.2f} ms per call "
                f"(one core saturates at ~{calls / max(server_cpu, 1e-9):.0f} requests/s)"
            )
        finally:
            _stop_server(server)
    if report[1]:
        raise SystemExit(f"{len(report[1])} calls failed, first: {report[1][:3]}")


if __name__ == "__main__":
    main()
