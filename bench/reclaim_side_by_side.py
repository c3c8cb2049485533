"""Benchmark: Spotpool against the article's naive loop, replacing reclaimed spot instances.

Both keep a pool of `--size` spot instances on ONE emulator (boot delay `--boot` s), at the same
interval (`--interval`): Spotpool as `spotpool operator run` on a local kube-apiserver with the
pool's `refreshInterval` set to it; the article's controller as the loop it describes — every
interval, list the instances by tag and call RunInstances for the shortfall (official SDK).
Each round waits a random part of the interval (a random phase), then reclaims one instance of
each pool at the same moment; the clock runs from the reclaim until the pool again has `--size`
RUNNING instances in the cloud. Prints p50/p95 for both and the ratio, and writes a PNG of the
two latency distributions (CDF) beside the numbers.

With `--notice S` the emulator announces each reclaim S seconds ahead (the termination notice),
the operator serves its notice endpoint and every Spotpool instance runs `spotpool notice-agent`
(one process per emulated instance, settings from its user data), while the article's loop
knows nothing of notices. The capacity gap is how long each pool had fewer RUNNING instances than
its size (the noticed instance counts while it still runs).

    .venv/bin/python bench/reclaim_side_by_side.py [--rounds 12] [--interval 10] [--size 2]
        [--boot 1] [--png docs/reclaim-side-by-side.png]
"""

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pydantic import SecretStr  # noqa: E402
from tencentcloud.cvm.v20170312 import models  # noqa: E402

from bench.plots import latency_cdf, percentile  # noqa: E402
from spotpool.engine.tencent import cloud  # noqa: E402
from spotpool.engine.tencent.credentials import Credentials  # noqa: E402
from spotpool.localworld.agents import NoticeAgents  # noqa: E402
from spotpool.localworld.emulator import (  # noqa: E402
    SECRET_ID,
    SECRET_KEY,
    EmulatorProcess,
)
from spotpool.localworld.operator import OperatorWorld, local_world, pool_manifest  # noqa: E402
from spotpool.ports import free_port  # noqa: E402

CRD = ROOT / "crds" / "devops.jokerbai.com_spotpools.yaml"
REGION, ZONE, TYPE, IMAGE = "ap-singapore", "ap-singapore-2", "GN7.2XLARGE32", "img-eb30mz89"
LOOP_TAG = "article-pool"


class ArticleLoop:
    """The article's controller: every interval, count the pool's live instances by tag and
    RunInstances for the shortfall. Nothing else: no state, no refresh, no engine."""

    def __init__(
        self, emulator: EmulatorProcess, size: int, interval: float, name: str = "loop"
    ) -> None:
        keys = Credentials(secret_id=SecretStr(SECRET_ID), secret_key=SecretStr(SECRET_KEY))
        self.client = cloud.cvm(keys, REGION, emulator.endpoint)
        self.size, self.interval, self.name = size, interval, name  # name: its tag's value
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="article-loop")

    def _live(self) -> int:
        request = models.DescribeInstancesRequest()
        request.from_json_string(
            json.dumps(
                {"Filters": [{"Name": f"tag:{LOOP_TAG}", "Values": [self.name]}], "Limit": 100}
            )
        )
        reply = self.client.DescribeInstances(request)
        gone = {"TERMINATING", "SHUTDOWN", "LAUNCH_FAILED"}
        return sum(1 for item in reply.InstanceSet if item.InstanceState not in gone)

    def _run_instances(self, count: int) -> None:
        request = models.RunInstancesRequest()
        request.from_json_string(
            json.dumps(
                {
                    "InstanceChargeType": "SPOTPAID",
                    "InstanceMarketOptions": {
                        "MarketType": "spot",
                        "SpotOptions": {"MaxPrice": "1000", "SpotInstanceType": "one-time"},
                    },
                    "Placement": {"Zone": ZONE},
                    "InstanceType": TYPE,
                    "ImageId": IMAGE,
                    "InstanceCount": count,
                    "TagSpecification": [
                        {
                            "ResourceType": "instance",
                            "Tags": [{"Key": LOOP_TAG, "Value": self.name}],
                        }
                    ],
                }
            )
        )
        self.client.RunInstances(request)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                missing = self.size - self._live()
                if missing > 0:
                    self._run_instances(missing)
            except Exception as error:  # the loop in the article just logs and goes on
                print(f"  article loop: {error}", file=sys.stderr)
            self.stop.wait(self.interval)


def running(emulator: EmulatorProcess, tag: tuple[str, str]) -> set[str]:
    return {
        i["InstanceId"]
        for i in emulator.all_instances()
        if not i.get("Gone")
        and i["InstanceState"] == "RUNNING"
        and {"Key": tag[0], "Value": tag[1]} in (i.get("Tags") or [])
    }


def one_round(
    emulator: EmulatorProcess, size: int, tags: dict[str, tuple[str, str]], timeout: float
) -> dict[str, tuple[float, float]]:
    """Reclaim one instance of each pool at once; per pool: (seconds until `size` RUNNING
    again, seconds with fewer than `size` RUNNING)."""
    victims = {name: sorted(running(emulator, tag))[0] for name, tag in tags.items()}
    emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": list(victims.values())})
    start = time.monotonic()
    done: dict[str, float] = {}
    gap = dict.fromkeys(tags, 0.0)
    last = start
    while len(done) < len(tags):
        if time.monotonic() - start > timeout:
            raise TimeoutError(
                f"no replacement within {timeout} s: {sorted(set(tags) - set(done))}"
            )
        time.sleep(0.1)
        now = time.monotonic()
        for name, tag in tags.items():
            if name in done:
                continue
            live = running(emulator, tag)
            if len(live) < size:  # a noticed instance still counts until the cloud takes it
                gap[name] += now - last
            if victims[name] not in live and len(live) >= size:
                done[name] = now - start
        last = now
    return {name: (done[name], gap[name]) for name in tags}


def boot_agents(agents: NoticeAgents, uid: str, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        try:
            agents.boot(uid)
        except Exception as error:  # the next second tries again
            print(f"  agents: {error}", file=sys.stderr)


def settled(world: OperatorWorld, namespace: str, size: int) -> None:
    """Until the pool's status shows `size` RUNNING and no replacement in flight: the next
    reclaim must hit a slot's own instance, not a surge instance about to be promoted."""

    def done() -> bool:
        status = world.status(namespace, "bench")
        return status.get("readyReplicas") == size and not status.get("surges")

    world.wait_until(done, "the pool settled", 120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--interval", type=float, default=10)
    parser.add_argument("--size", type=int, default=2)
    parser.add_argument("--boot", type=float, default=1.0)
    parser.add_argument("--notice", type=float, default=0.0, help="termination notice, s")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--png", type=Path, default=ROOT / "docs" / "reclaim-side-by-side.png")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    load_before = os.getloadavg()[0]
    print(f"load average before: {load_before:.2f}; {os.cpu_count()} cores")
    with (
        tempfile.TemporaryDirectory(prefix="spotpool-bench-") as tmp,
        local_world(
            Path(tmp), boot_seconds=args.boot, notice_seconds=args.notice,
            refresh_seconds=int(args.interval),
            env={"SPOTPOOL_NOTICE_PORT": str(free_port())} if args.notice else {},
        ) as world,
    ):  # fmt: skip
        emulator = world.emulator
        loop = ArticleLoop(emulator, args.size, args.interval)
        try:
            world.start()
            namespace = world.namespace()
            every = f"{int(args.interval)}s"
            world.apply(
                namespace, pool_manifest("bench", replicas=args.size, refreshInterval=every)
            )
            pool = world.wait_ready(namespace, "bench", args.size)
            tags = {
                "spotpool": ("spotpool-pool-uid", str(pool["metadata"]["uid"])),
                "article loop": (LOOP_TAG, "loop"),
            }
            agents = NoticeAgents(emulator, REGION, Path(tmp) / "agents")
            if args.notice:  # cloud-init's part: an agent on every instance as it boots
                uid = str(pool["metadata"]["uid"])
                threading.Thread(
                    target=boot_agents, args=(agents, uid, loop.stop), daemon=True
                ).start()
            loop.thread.start()
            world.wait_until(
                lambda: len(running(emulator, tags["article loop"])) >= args.size, "the loop", 60
            )
            latency: dict[str, list[float]] = {name: [] for name in tags}
            gaps: dict[str, list[float]] = {name: [] for name in tags}
            for n in range(args.rounds):
                settled(world, namespace, args.size)
                time.sleep(rng.uniform(0, args.interval))  # a random phase of both intervals
                found = one_round(emulator, args.size, tags, timeout=120 + args.notice)
                for name, (seconds, gap) in found.items():
                    latency[name].append(seconds)
                    gaps[name].append(gap)
                print(
                    f"  round {n + 1:2d}: "
                    + ", ".join(f"{k} {v[0]:5.1f} s (gap {v[1]:4.1f} s)" for k, v in found.items()),
                    flush=True,
                )
        finally:
            loop.stop.set()
            agents.stop()
    ours, theirs = latency["spotpool"], latency["article loop"]
    print(
        f"interval {args.interval:g} s, size {args.size}, boot {args.boot:g} s, "
        f"notice {args.notice:g} s, {args.rounds} reclaims at random phases:"
    )
    for name in latency:
        print(
            f"  {name:12s} reclaim → RUNNING p50 {statistics.median(latency[name]):5.1f} s, "
            f"p95 {percentile(latency[name], 0.95):5.1f} s; capacity gap "
            f"p50 {statistics.median(gaps[name]):4.1f} s, p95 {percentile(gaps[name], 0.95):4.1f} s"
        )
    print(
        f"  ratio spotpool/loop: p50 {statistics.median(ours) / statistics.median(theirs):.2f}, "
        f"p95 {percentile(ours, 0.95) / percentile(theirs, 0.95):.2f}"
    )
    title = (
        f"{args.rounds} reclaims, pool of {args.size}, interval {args.interval:g} s, "
        f"boot {args.boot:g} s, notice {args.notice:g} s; {os.cpu_count()} cores, "
        f"load {load_before:.1f} before / {os.getloadavg()[0]:.1f} after"
    )
    latency_cdf(latency, args.png, title)
    print(f"  plot: {args.png}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
