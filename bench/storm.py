"""Benchmark: a reclaim storm, Spotpool against the article's loop on one emulator.

`--pools` pools of `--size` under one `spotpool operator run` (local kube-apiserver, file
backend, refreshInterval `--interval`) and, unless `--no-loop`, the same number of pools each
under the article's loop (its own thread, same interval, a random phase: every interval, count
the pool's live instances by tag and RunInstances the shortfall). Then `--share` of each side's
RUNNING instances is reclaimed in one call, and the emulator is watched until both sides are
whole again. Per side: each reclaimed instance's replacement reclaim → RUNNING p50/p95/max,
the time until every pool is full, the capacity gap (instance-seconds short of the sizes),
the RunInstances/DescribeInstances calls after the reclaim, and CPU-s (the operator's whole
process tree; the loops' own threads).

`--seeded` makes the operator's pools as bench/fleet_probe.py does (one converged template,
the rest seeded: instances, checkpoints, status) for fleets too big to converge first;
`--rate-limits` turns on the emulator's real per-action request limits (RunInstances 10/s,
DescribeInstances 40/s per account and region). `--accounts N` spreads the operator's pools over
N accounts, a quarter each for 4: each pool assumes a role of its account (STS AssumeRole with
the emulator's own keys), so the limits, the buckets and the fleet probe are per account.

    .venv/bin/python bench/storm.py [--pools 40] [--size 2] [--share 0.25] [--interval 10]
    .venv/bin/python bench/storm.py --pools 1000 --seeded --no-loop --rate-limits
    .venv/bin/python bench/storm.py --pools 1000 --seeded --no-loop --rate-limits --accounts 4
"""

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


from bench.fleet_probe import Seeder, tree_cpu_and_rss  # noqa: E402
from bench.plots import percentile  # noqa: E402
from bench.reclaim_side_by_side import LOOP_TAG, ArticleLoop  # noqa: E402
from bench.storm_accounts import AccountSeeder, StormAccounts  # noqa: E402
from spotpool.localworld.emulator import EmulatorProcess  # noqa: E402
from spotpool.localworld.operator import OperatorWorld, local_world, pool_manifest  # noqa: E402

POOL_TAG = "spotpool-pool-uid"
GONE = {"TERMINATING", "SHUTDOWN", "LAUNCH_FAILED"}


class PoolLoop(ArticleLoop):
    """The article's controller for one pool, at its own phase, counting its own CPU-s."""

    def __init__(self, emulator: EmulatorProcess, name: str, size: int, interval: float) -> None:
        super().__init__(emulator, size, interval, name)
        self.cpu = 0.0  # this loop's thread's CPU-s

    def run(self, phase: float) -> None:
        self.stop.wait(phase)
        while not self.stop.is_set():
            started = time.thread_time()
            try:
                missing = self.size - self._live()
                if missing > 0:
                    self._run_instances(missing)
            except Exception as error:  # the article's loop logs and goes on
                print(f"  loop {self.name}: {type(error).__name__}", file=sys.stderr)
            self.cpu += time.thread_time() - started
            self.stop.wait(self.interval)


def fleet(emulator: EmulatorProcess) -> dict[str, dict[str, set[str]]]:
    """side -> pool -> RUNNING instance ids, from one look at the emulator."""
    sides: dict[str, dict[str, set[str]]] = {"spotpool": {}, "loop": {}}
    for item in emulator.all_instances():
        if item.get("Gone") or item["InstanceState"] != "RUNNING":
            continue
        for tag in item.get("Tags") or []:
            side = {POOL_TAG: "spotpool", LOOP_TAG: "loop"}.get(tag["Key"])
            if side:
                sides[side].setdefault(tag["Value"], set()).add(item["InstanceId"])
    return sides


class Watch:
    """Per side: when each replacement came up RUNNING, when every pool was full, the gap."""

    def __init__(self, before: dict[str, dict[str, set[str]]], size: int, victims: set[str]):
        self.before, self.size, self.victims = before, size, victims
        self.seen: set[str] = set()
        self.times: dict[tuple[str, str], list[float]] = {}  # (side, pool) -> new RUNNING at
        self.full: dict[str, float] = {}  # side -> seconds until every pool was full
        self.gap = dict.fromkeys(before, 0.0)

    def look(self, now: dict[str, dict[str, set[str]]], t: float, dt: float) -> None:
        for side, pools in self.before.items():
            short = 0
            for pool, old in pools.items():
                live = now[side].get(pool, set())
                for new in live - old - self.seen:
                    self.seen.add(new)
                    self.times.setdefault((side, pool), []).append(t)
                short += max(0, self.size - len(live - self.victims))
            self.gap[side] += short * dt
            if short == 0 and side not in self.full:
                self.full[side] = t

    def latencies(self, side: str, reclaimed: dict[str, int]) -> list[float]:
        """Each reclaimed instance's replacement: a pool's k reclaims, its first k new ones."""
        found: list[float] = []
        for pool, count in reclaimed.items():
            found += sorted(self.times.get((side, pool), []))[:count]
        return found


def calls_after(emulator: EmulatorProcess, since: float) -> dict[str, dict[str, int]]:
    """side -> action -> calls since `since` (the loop's carry its tag; the rest is ours)."""
    counts: dict[str, dict[str, int]] = {"spotpool": {}, "loop": {}}
    for call in emulator.admin_ok("GET", "/_emulator/requests")["Requests"]:
        if call["Time"] < since or call["Action"] not in ("RunInstances", "DescribeInstances"):
            continue
        side = "loop" if LOOP_TAG in json.dumps(call.get("Params") or {}) else "spotpool"
        counts[side][call["Action"]] = counts[side].get(call["Action"], 0) + 1
    return counts


def launch_window(emulator: EmulatorProcess, reclaimed_at: float) -> str:
    """When our RunInstances calls were answered, after the reclaim, and how many were refused:
    what separates the operator's part of a replacement from the boot and the watch."""
    calls = [
        c for c in emulator.admin_ok("GET", "/_emulator/requests?action=RunInstances")["Requests"]
        if c["Time"] >= reclaimed_at and LOOP_TAG not in json.dumps(c.get("Params") or {})
    ]  # fmt: skip
    ok = [c["Time"] - reclaimed_at for c in calls if c["Code"] == "OK"]
    refused = len(calls) - len(ok)
    if not ok:
        return f"no RunInstances answered OK ({refused} refused)"
    # The fleet probe looks once a second: the reclaim is seen at its first look after it, a
    # phase of 0-1 s that no operator change moves. Shown apart from what follows the look.
    looks = [
        c["Time"] - reclaimed_at
        for c in emulator.admin_ok("GET", "/_emulator/requests?action=DescribeInstances")[
            "Requests"]
        if c["Time"] >= reclaimed_at and LOOP_TAG not in json.dumps(c.get("Params") or {})
    ]  # fmt: skip
    seen = (
        f"; first DescribeInstances +{min(looks):.2f} s, first RunInstances "
        f"{min(ok) - min(looks):.2f} s after it"
        if looks
        else "; no DescribeInstances after the reclaim"
    )
    return (
        f"RunInstances OK {len(ok)} from +{min(ok):.1f} s to +{max(ok):.1f} s "
        f"({len(ok) / max(max(ok) - min(ok), 0.1):.1f}/s), {refused} refused" + seen
    )


def converge(world: OperatorWorld, args: argparse.Namespace, accounts: StormAccounts) -> None:
    namespace = world.namespace()
    if args.seeded:
        world.start()
        accounts.configure(world.emulator)
        seeder: Seeder = (
            AccountSeeder(world, namespace, args.pools - 1, args.size, accounts)
            if accounts.count > 1
            else Seeder(world, namespace, args.pools - 1, args.size)
        )
        template = seeder.template()
        world.stop()
        seeder.seed(template)
        world.hostname = f"spotpool-operator-{uuid.uuid4().hex[:5]}"
        world.start()
    else:
        world.start()
        accounts.configure(world.emulator)
        every = f"{int(args.interval)}s"
        items = [
            accounts.pool(pool_manifest(f"p{n:04d}", replicas=args.size, refreshInterval=every))
            for n in range(args.pools)
        ]
        world.kube.ok(
            "-n", namespace, "apply", "--server-side", "-f", "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
        )  # fmt: skip
    started = time.monotonic()

    def whole() -> bool:
        pools = fleet(world.emulator)["spotpool"]
        return len(pools) >= args.pools and all(len(v) >= args.size for v in pools.values())

    world.wait_until(whole, "every pool converged", timeout=args.timeout)
    print(f"  {args.pools} pools of {args.size} RUNNING after {time.monotonic() - started:.0f} s")
    time.sleep(args.settle)  # the operator's status writes and first probe sweeps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=40)
    parser.add_argument("--size", type=int, default=2)
    parser.add_argument("--share", type=float, default=0.25, help="of each side's instances")
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--boot", type=float, default=1.0)
    parser.add_argument("--seeded", action="store_true", help="seed pools (fleet_probe.py)")
    parser.add_argument("--no-loop", action="store_true", help="the operator's side only")
    parser.add_argument("--rate-limits", action="store_true", help="the emulator's real limits")
    parser.add_argument("--settle", type=float, default=30.0, help="a fleet at rest first")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep-log", type=Path, help="copy the operator's log here at the end")
    parser.add_argument(
        "--accounts", type=int, default=1, help="spread the pools over this many accounts (roles)"
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="spotpool-storm-") as tmp,
        local_world(
            Path(tmp), boot_seconds=args.boot, refresh_seconds=int(args.interval),
            env={"SPOTPOOL_LEASE_DURATION": "30s"},
        ) as world,
    ):  # fmt: skip
        emulator = world.emulator
        accounts = StormAccounts(args.accounts)
        converge(world, args, accounts)
        if args.rate_limits:  # after the seeding, which is no part of the storm
            emulator.admin_ok("POST", "/_emulator/rate-limits", {"Enabled": True})
        loops = [] if args.no_loop else [
            PoolLoop(emulator, f"loop-{n:04d}", args.size, args.interval)
            for n in range(args.pools)
        ]  # fmt: skip
        threads = [
            threading.Thread(target=loop.run, args=(rng.uniform(0, args.interval),), daemon=True)
            for loop in loops
        ]
        for thread in threads:
            thread.start()
        try:
            if loops:
                world.wait_until(
                    lambda: (
                        sum(len(v) for v in fleet(emulator)["loop"].values())
                        >= args.pools * args.size
                    ),
                    "the loops' pools full",
                    timeout=120,
                )
            time.sleep(rng.uniform(0, args.interval))  # a random phase of every interval
            before = fleet(emulator)
            victims: set[str] = set()
            reclaimed: dict[str, dict[str, int]] = {"spotpool": {}, "loop": {}}
            for side, pools in before.items():
                everything = sorted((i, p) for p, ids in pools.items() for i in ids)
                for instance, pool in rng.sample(everything, k=int(len(everything) * args.share)):
                    victims.add(instance)
                    reclaimed[side][pool] = reclaimed[side].get(pool, 0) + 1
            assert world.process is not None
            cpu0, _ = tree_cpu_and_rss(world.process.pid)
            loop_cpu0 = sum(loop.cpu for loop in loops)
            since = max((c["Time"] for c in emulator.admin_ok("GET", "/_emulator/requests")[
                "Requests"]), default=0.0)  # fmt: skip
            start, reclaimed_at = time.monotonic(), time.time()
            emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": sorted(victims)})
            watch = Watch(before, args.size, victims)
            sides = [s for s in before if reclaimed[s]]
            last = start
            looks: list[float] = []  # how long each look at the emulator took
            cpu: dict[str, float] = {}
            while not all(side in watch.full for side in sides):
                if time.monotonic() - start > args.timeout:
                    raise TimeoutError(f"not whole after {args.timeout} s: {watch.full}")
                time.sleep(0.25)
                looked = time.monotonic()
                now_fleet, now = fleet(emulator), time.monotonic()
                looks.append(now - looked)
                watch.look(now_fleet, now - start, now - last)
                last = now
                if "spotpool" in watch.full and "spotpool" not in cpu:
                    cpu["spotpool"] = tree_cpu_and_rss(world.process.pid)[0] - cpu0
                if "loop" in watch.full and "loop" not in cpu:
                    cpu["loop"] = sum(loop.cpu for loop in loops) - loop_cpu0
            calls = calls_after(emulator, since)
            window = launch_window(emulator, reclaimed_at)
        finally:
            for loop in loops:
                loop.stop.set()
            if args.keep_log:
                shutil.copyfile(world.log, args.keep_log)
    print(
        f"{args.pools} pools of {args.size} a side, {args.share:.0%} reclaimed at once, interval "
        f"{args.interval:g} s, boot {args.boot:g} s, emulator limits "
        f"{'on' if args.rate_limits else 'off'}, {args.accounts} account(s):"
    )
    for side in sides:
        found = watch.latencies(side, reclaimed[side])
        count = sum(reclaimed[side].values())
        print(
            f"  {side:9s} {count} reclaimed: reclaim → RUNNING p50 {statistics.median(found):5.1f}"
            f" s, p95 {percentile(found, 0.95):5.1f} s, max {max(found):5.1f} s; full after "
            f"{watch.full[side]:5.1f} s; gap {watch.gap[side]:6.0f} instance-s; "
            f"RunInstances {calls[side].get('RunInstances', 0)}, DescribeInstances "
            f"{calls[side].get('DescribeInstances', 0)}; CPU {cpu.get(side, 0.0):5.1f} s"
        )
    print(f"  spotpool  {window}")
    print(
        f"  watch: {len(looks)} looks at the emulator, median {statistics.median(looks):.2f} s, "
        f"max {max(looks):.2f} s (a replacement is seen up to one look late)"
    )
    if len(sides) == 2:
        ours, theirs = (watch.latencies(s, reclaimed[s]) for s in ("spotpool", "loop"))
        print(
            f"  ratio spotpool/loop: p95 {percentile(ours, 0.95) / percentile(theirs, 0.95):.2f}"
            f", full {watch.full['spotpool'] / watch.full['loop']:.2f}"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
