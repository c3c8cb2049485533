"""Benchmark: what a misbehaving cloud costs (issue 45), against the fault rate.

For each rate R of `--rates` (default 0, 0.1, 0.3), a fresh local world (a kube-apiserver, the
emulator, one operator process) whose emulator loses R of the RunInstances and
TerminateInstances answers after they took effect, lags its listing `--lag` s behind every
launch and termination (when R > 0) and answers R/2 of all calls with RequestLimitExceeded or
InternalError without doing them. Then `--pools` pools of `--size`:

1. apply them all at once: seconds until every pool is Ready and the cloud runs exactly the
   instances the statuses list (no extra beside any slot);
2. reclaim half the instances at once: seconds until every pool is whole again likewise;
3. delete every pool: seconds until no instance of them runs and no Spotpool is left.

Instances made per slot (every instance the emulator ever made for the pools, over the slots
filled: the first fill and the replacements) and the answers lost are printed per rate.

    .venv/bin/python bench/misbehaving_cloud.py [--rates 0,0.1,0.3] [--pools 4] [--size 3]
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spotpool.localworld.operator import OperatorWorld, local_world, pool_manifest  # noqa: E402


def faults(rate: float, lag: float) -> list[str]:
    if rate <= 0:
        return []
    half = f"{rate / 2:g}"
    return ["--lose-answers", f"{rate:g}", "--listing-lag", f"{lag:g}",
            "--throttle", half, "--server-errors", half, "--seed", "45"]  # fmt: skip


def whole(world: OperatorWorld, ns: str, uids: dict[str, str], size: int) -> bool:
    for name, uid in uids.items():
        status = world.status(ns, name)
        listed = {i["instanceId"] for i in status.get("instances") or []}
        if status.get("phase") != "Ready" or len(listed) != size:
            return False
        if set(world.cloud(uid)) != listed:
            return False
    return True


def one_rate(rate: float, lag: float, pools: int, size: int) -> str:
    with (
        tempfile.TemporaryDirectory(prefix="spotpool-bench-") as tmp,
        local_world(Path(tmp), boot_seconds=1, emulator_args=faults(rate, lag)) as world,
    ):
        world.start()
        ns = world.namespace()
        names = [f"pool-{n}" for n in range(pools)]
        started = time.monotonic()
        for name in names:
            world.apply(ns, pool_manifest(name, replicas=size, maximum=size + 2))
        uids = {n: world.wait_ready(ns, n, size, timeout=900)["metadata"]["uid"] for n in names}
        world.wait_until(lambda: whole(world, ns, uids, size), "every pool whole", 600)
        ready = time.monotonic() - started

        reclaimed = world.emulator.admin_ok(
            "POST", "/_emulator/reclaim", {"Count": pools * size // 2}
        )
        started = time.monotonic()
        world.wait_until(lambda: whole(world, ns, uids, size), "whole after the reclaim", 600)
        rewhole = time.monotonic() - started
        slots = pools * size + len(reclaimed["Reclaimed"])
        made = len(world.made(set(uids.values())))

        started = time.monotonic()
        for name in names:
            world.kube.ok("-n", ns, "delete", "spotpool", name, "--wait=false")

        def emptied() -> bool:
            return not any(world.cloud(u) for u in uids.values()) and all(
                world.get(ns, n) is None for n in names
            )

        world.wait_until(emptied, "every pool deleted, nothing left", 900)
        zero = time.monotonic() - started
        lost = world.emulator.lost_answers()
        return (
            f"{rate:5.0%}  {ready:7.1f}  {rewhole:7.1f}  {made / slots:9.2f}  {zero:9.1f}  "
            f"{lost.get('RunInstances', 0):5d} / {lost.get('TerminateInstances', 0):d}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="0,0.1,0.3")
    parser.add_argument("--lag", type=float, default=8.0)
    parser.add_argument("--pools", type=int, default=4)
    parser.add_argument("--size", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(f"{args.pools} pools of {args.size}, listing lag {args.lag:g} s when faulty")
    print(" rate  ready s  whole s  made/slot  to zero s  lost run / terminate")
    for rate in (float(r) for r in args.rates.split(",")):
        print(one_rate(rate, args.lag, args.pools, args.size), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
