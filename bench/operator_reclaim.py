"""Benchmark: how fast the operator replaces a reclaimed spot instance, and what it costs idle.

Issue 5's targets on this machine: reclaim-to-replaced p95 <= 20 s with a 10 s refresh
interval; under 5% of one core while idling with 50 pools.

The bench starts its own world — a local kube-apiserver (`spotpool cluster up`), the emulator
(boot delay 1 s, reclaim notice 0) and `spotpool operator run` as a process of its own — then:

1. reclaim: one pool of 2 instances with `refreshInterval: 10s`; `--reclaims` times, the
   emulator reclaims one of them and the clock runs from the moment the instance is gone from
   DescribeInstances until the pool's status lists a replacement RUNNING (and the cloud agrees).
   Prints p50, p95 and max.
2. idle: `--pools` pools of one instance each (refreshInterval 10 s), all converged, then the
   operator process's CPU (user+system from /proc, its children included) and RSS over
   `--idle-seconds`.

    .venv/bin/python bench/operator_reclaim.py [--reclaims 20] [--pools 50] [--idle-seconds 60]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spotpool.localworld.operator import OperatorWorld, local_world, pool_manifest  # noqa: E402

CRD = ROOT / "crds" / "devops.jokerbai.com_spotpools.yaml"


def _ids(world: OperatorWorld, namespace: str, name: str) -> dict[str, str]:
    return {
        str(i["instanceId"]): str(i.get("state"))
        for i in world.status(namespace, name).get("instances") or []
    }


def _gone(world: OperatorWorld, uid: str, instance_id: str) -> bool:
    return instance_id not in world.cloud(uid)


def reclaims(world: OperatorWorld, rounds: int) -> list[float]:
    namespace = world.namespace()
    world.apply(namespace, pool_manifest("bench", replicas=2, refreshInterval="10s"))
    world.wait_ready(namespace, "bench", 2)
    uid = world.get(namespace, "bench")["metadata"]["uid"]  # type: ignore[index]
    times = []
    for n in range(rounds):
        victim = sorted(_ids(world, namespace, "bench"))[0]
        world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [victim]})
        world.wait_until(partial(_gone, world, uid, victim), "the reclaim", 60)
        gone = time.monotonic()

        def replaced(v: str = victim) -> bool:
            ids = _ids(world, namespace, "bench")
            cloud = world.cloud(uid)
            running = [i for i, s in ids.items() if s == "RUNNING" and cloud.get(i) == "RUNNING"]
            return v not in ids and len(running) == 2

        world.wait_until(replaced, "the replacement in the status", 120)
        times.append(time.monotonic() - gone)
        print(f"  reclaim {n + 1:2d}: replaced in {times[-1]:5.1f} s", flush=True)
    return times


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime + cutime + cstime) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def idle(world: OperatorWorld, pools: int, seconds: float) -> None:
    namespace = world.namespace()
    started = time.monotonic()
    for n in range(pools):
        world.apply(namespace, pool_manifest(f"idle-{n}", replicas=1, refreshInterval="10s"))
    for n in range(pools):
        world.wait_ready(namespace, f"idle-{n}", 1, timeout=900)
    print(f"  {pools} pools converged in {time.monotonic() - started:.0f} s", flush=True)
    assert world.process is not None
    pid = world.process.pid
    time.sleep(15)  # let the first round of checks pass
    before, t0 = _cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    used, wall = _cpu_seconds(pid) - before, time.monotonic() - t0
    print(
        f"  idle over {wall:.0f} s: {100 * used / wall:.1f}% of one core "
        f"(operator and its Pulumi runs), operator RSS {_rss_mib(pid):.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reclaims", type=int, default=20)
    parser.add_argument("--pools", type=int, default=50)
    parser.add_argument("--idle-seconds", type=float, default=60)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with (
        tempfile.TemporaryDirectory(prefix="spotpool-bench-") as tmp,
        local_world(Path(tmp), boot_seconds=1, refresh_seconds=10) as world,
    ):
        world.start()
        if args.reclaims:
            print(f"reclaim to replaced, refreshInterval 10 s, {args.reclaims} reclaims:")
            times = sorted(reclaims(world, args.reclaims))
            p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
            print(f"  p50 {statistics.median(times):.1f} s, p95 {p95:.1f} s, max {times[-1]:.1f} s")
        if args.pools:
            print(f"idle with {args.pools} pools:")
            idle(world, args.pools, args.idle_seconds)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
