"""Benchmark: DescribeInstances over 1,000 instances — requests/s, p50/p99 latency, server RSS.

Issue 3 asks for at least 500 DescribeInstances requests/s over a world of 1,000 instances. The
operator's refresh and the provider's reads are DescribeInstances calls, so this is the
emulator's hot path. The bench starts its own emulator on loopback (boot delay 0, state in a
temporary directory), creates the instances with RunInstances in batches of 100 (10 pools of
100, tagged `pool=p0..p9`, spread over two zones), then for each workload sends a bounded number
of signed DescribeInstances calls, prints what the clients measured, the server's CPU per call
and its peak RSS, and stops the server by its pid.

Workloads (`--workload`, repeatable; default all four):

- `by-id`: one instance by id — what the provider's read and refresh send;
- `pool`: one pool's 100 instances by `tag:pool` — a filter over the whole world;
- `pages`: unfiltered pages of 100 over the whole world — the largest replies;
- `mixed`: pages of 100, a quarter each unfiltered, by state, by tag and by zone.

Two kinds of client (`--client`), because on a 2-core machine the client's own CPU decides the
figure:

- `wire` (default): every request is built and TC3-signed by the official SDK's own request
  builder (the exact bytes `CvmClient` would send), then sent over keep-alive connections from
  one asyncio process. Cheap on the client, so it measures the server.
- `sdk`: `CvmClient.DescribeInstances` end to end in a few processes, replies parsed into SDK
  models — what a Python SDK program sees. The SDK spends ~15 ms of CPU per 100-instance page,
  so for the page workloads this measures the SDK more than the emulator.

The load average is printed before and after: the figures are only comparable at similar load.

    .venv/bin/python bench/emulator_describe.py [--client wire|sdk] [--workload by-id ...]
        [--requests 3000] [--instances 1000] [--concurrency N] [--seconds 60]
"""

import argparse
import asyncio
import json
import math
import multiprocessing
import os
import sys
import tempfile
import time
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spotpool.localworld.emulator import SECRET_ID, SECRET_KEY, start_emulator

REGION = "ap-guangzhou"
ZONES = ["ap-guangzhou-3", "ap-guangzhou-4"]
BATCH = 100  # instances per RunInstances call, and per pool
PAGE = 100
WORKLOADS = ("by-id", "pool", "pages", "mixed")
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
def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time the process has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _memory_mib(pid: int, field: str) -> float:
    """A memory figure of /proc/<pid>/status (VmRSS now, VmHWM the peak), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return math.nan


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


# -- the cloud and the calls -------------------------------------------------------------------
def _create(port: int, instances: int) -> list[str]:
    """Spot instances in batches of 100, one pool (tag) per batch, alternating zones."""
    client = _client(port)
    ids: list[str] = []
    for batch, start in enumerate(range(0, instances, BATCH)):
        body = {
            "InstanceChargeType": "SPOTPAID",
            "InstanceMarketOptions": {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time", "MaxPrice": "1.5"},
            },
            "Placement": {"Zone": ZONES[batch % len(ZONES)]},
            "ImageId": "img-eb30mz89",
            "InstanceType": "GN7.2XLARGE32",
            "InstanceCount": min(BATCH, instances - start),
            "VirtualPrivateCloud": {"VpcId": "DEFAULT", "SubnetId": "DEFAULT"},
            "InternetAccessible": {"InternetMaxBandwidthOut": 10, "PublicIpAssigned": True},
            "TagSpecification": [
                {"ResourceType": "instance", "Tags": [{"Key": "pool", "Value": f"p{batch}"}]}
            ],
        }
        reply = client.RunInstances(_request(models.RunInstancesRequest, body))
        ids += [str(i) for i in reply.InstanceIdSet]
    return ids


def _describe_body(workload: str, n: int, ids: list[str]) -> dict[str, Any]:
    """The parameters of the n-th call of `workload`."""
    pools = math.ceil(len(ids) / BATCH)
    if workload == "by-id":
        return {"InstanceIds": [ids[n * 7919 % len(ids)]]}
    if workload == "pool":
        return {"Filters": [{"Name": "tag:pool", "Values": [f"p{n % pools}"]}], "Limit": PAGE}
    if workload == "pages" or n % 4 == 0:
        return {"Offset": n * PAGE % len(ids), "Limit": PAGE}
    if n % 4 == 1:
        filters = [{"Name": "instance-state", "Values": ["RUNNING"]}]
    elif n % 4 == 2:
        filters = [{"Name": "tag:pool", "Values": [f"p{n % pools}"]}]
    else:
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
    port: int, workload: str, ids: list[str], requests: int, concurrency: int, seconds: float
) -> Report:
    """`concurrency` tasks share one keep-alive session; each request is signed by the SDK."""
    signer = _client(port)
    url = f"http://127.0.0.1:{port}/"
    latencies: list[float] = []
    errors: list[str] = []
    numbers = iter(range(requests))

    def signed(n: int) -> tuple[dict[str, str], bytes]:
        request = RequestInternal(f"127.0.0.1:{port}", "POST", "/")
        signer._build_req_inter("DescribeInstances", _describe_body(workload, n, ids), request)
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
        await asyncio.gather(*(one(session, c) for c in range(concurrency)))  # warm up
        latencies.clear()
        began = time.monotonic()
        await asyncio.gather(*(worker(session, began + seconds) for _ in range(concurrency)))
        return latencies, errors, began, time.monotonic()


# -- client: the SDK end to end, in processes --------------------------------------------------
def _sdk_process(
    port: int,
    workload: str,
    ids: list[str],
    first: int,
    count: int,
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
        request = _request(models.DescribeInstancesRequest, _describe_body(workload, n, ids))
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
    port: int, workload: str, ids: list[str], requests: int, processes: int, seconds: float
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
                workload,
                ids,
                p * share,
                max(0, min(share, requests - p * share)),
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


def _row(workload: str, report: Report, server_cpu: float) -> str:
    latencies, errors, began, finished = report
    latencies = sorted(latencies)
    rate = len(latencies) / (finished - began)
    return (
        f"{workload:8} {len(latencies):6} {rate:8.0f} {_percentile(latencies, 0.50) * 1000:8.1f}"
        f" {_percentile(latencies, 0.99) * 1000:8.1f} {latencies[-1] * 1000:8.1f}"
        f" {server_cpu * 1000 / max(len(latencies), 1):10.2f} {len(errors):6}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--client", choices=["wire", "sdk"], default="wire")
    parser.add_argument(
        "--workload", choices=WORKLOADS, action="append", help="repeatable; default: all"
    )
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=3000, help="calls per workload")
    parser.add_argument(
        "--concurrency", type=int, default=0, help="in flight (default: wire 8, sdk 3 processes)"
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="per workload, at most")
    options = parser.parse_args()
    if options.instances < 1:
        parser.error("--instances must be at least 1")
    workloads: list[str] = options.workload or list(WORKLOADS)
    concurrency = options.concurrency or (8 if options.client == "wire" else 3)
    if options.client == "wire":
        clients = f"{concurrency} in flight, SDK-signed requests over aiohttp (1 process)"
    else:
        clients = f"{concurrency} processes, CvmClient.DescribeInstances end to end"

    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="spotpool-bench-") as workdir:
        print(f"load average  {_load()}")
        emulator = start_emulator(
            Path(workdir) / "cloud.db", Path(workdir) / "emulator.log", boot_seconds=0
        )
        port, server = emulator.port, emulator.process
        try:
            began = time.perf_counter()
            ids = _create(port, options.instances)
            created_in = time.perf_counter() - began
            print(f"instances     {len(ids)}, created in {created_in:.2f} s")
            print(f"clients       {clients}")
            print(f"target        >= {TARGET_RPS:.0f} requests/s")
            print("workload    calls    req/s   p50 ms   p99 ms   max ms  server ms/call errors")
            for workload in workloads:
                cpu_before = _cpu_seconds(server.pid)
                if options.client == "wire":
                    report = asyncio.run(
                        _wire_clients(
                            port, workload, ids, options.requests, concurrency, options.seconds
                        )
                    )
                else:
                    report = _sdk_clients(
                        port, workload, ids, options.requests, concurrency, options.seconds
                    )
                print(_row(workload, report, _cpu_seconds(server.pid) - cpu_before), flush=True)
                failed += [f"{workload}: {e}" for e in report[1]]
            print(
                f"server        RSS {_memory_mib(server.pid, 'VmRSS'):.0f} MiB, "
                f"peak {_memory_mib(server.pid, 'VmHWM'):.0f} MiB"
            )
            print(f"load average  {_load()}")
        finally:
            emulator.stop()
    if failed:
        raise SystemExit(f"{len(failed)} calls failed, first: {failed[:3]}")


if __name__ == "__main__":
    main()
