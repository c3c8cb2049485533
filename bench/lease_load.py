"""Benchmark: does one replica keep its shard Leases when it is starved of CPU in storms?

The local world (spotpool.localworld: kube-apiserver, the emulator, a file backend) and one
`spotpool operator run` holding every shard (Lease `--lease` s, the tests' 6 s by default),
`--pools` pools of `--size`. The operator's whole process tree (its Pulumi CLIs and plugins
too) runs under a CPU quota of `--cpu-quota` cores (a cgroup's CFS quota, as a pod at its CPU
limit), and `--burners` busy processes beside it push the machine's load up (0: the quota
alone; 20 on two cores makes a load of 20+). Every `--storm-every` s, `--share` of the pools'
RUNNING instances are reclaimed at once, for `--minutes` (30 is the target: a shorter run says
less). Counted from the operator's log:

- slips: a shard Lease not renewed within two thirds of its duration (before the renewal
  thread: every "lost shard", which then killed the shard's runs at once);
- kept: a slipped Lease renewed before its runs were killed (no other holder in between);
- lost: a shard whose runs were stopped (not renewed in time, or another holder);
- killed runs: Pulumi processes killed for a lost shard.

And how the quota bit (cgroup cpu.stat: periods throttled, seconds throttled), the machine's
load average (mean, max of one sample a storm) and whether every pool was whole at the end.

    .venv/bin/python bench/lease_load.py [--minutes 30] [--cpu-quota 1.0] [--burners 0]
        [--pools 20] [--size 2] [--share 0.5] [--storm-every 60] [--lease 6]

Needs root for the cgroup (cgroup v1 `cpu` or v2); `--cpu-quota 0` runs without one.
"""

import argparse
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from spotpool.localworld.operator import OperatorWorld, local_world, pool_manifest  # noqa: E402

POOL_TAG = "spotpool-pool-uid"
PERIOD_US = 100_000
PATTERNS = {
    "slipped": re.compile(r"Lease \S+ slipped \(renewal late\)"),
    "kept": re.compile(r"renewed late, no other holder in between"),
    "lost": re.compile(r"lost shard \d+|is held by \S+: stopping its work"),
}
KILLED = re.compile(r"shard \d+: killed runs \[([\d, ]*)\]")


class Quota:
    """A cgroup with a CPU quota that the operator's process tree is moved into."""

    def __init__(self, cores: float) -> None:
        self.cores = cores
        name = f"spotpool-lease-load-{os.getpid()}"
        v1 = Path("/sys/fs/cgroup/cpu")
        self.v1 = (v1 / "cpu.cfs_quota_us").exists()
        self.path = (v1 if self.v1 else Path("/sys/fs/cgroup")) / name
        self.path.mkdir()
        if self.v1:
            (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self.path / "cpu.cfs_quota_us").write_text(str(int(cores * PERIOD_US)))
        else:
            (self.path / "cpu.max").write_text(f"{int(cores * PERIOD_US)} {PERIOD_US}")

    def enter(self, pid: int) -> None:
        """The process and everything below it (its later children follow it)."""
        root = psutil.Process(pid)
        for process in [root, *root.children(recursive=True)]:
            with contextlib.suppress(OSError, psutil.Error):
                (self.path / "cgroup.procs").write_text(str(process.pid))

    def throttled(self) -> tuple[int, int, float]:
        """Periods, periods throttled, seconds throttled."""
        stat = dict(
            line.split() for line in (self.path / "cpu.stat").read_text().splitlines() if line
        )
        if self.v1:
            return (
                int(stat["nr_periods"]),
                int(stat["nr_throttled"]),
                int(stat["throttled_time"]) / 1e9,
            )
        return int(stat["nr_periods"]), int(stat["nr_throttled"]), int(stat["throttled_usec"]) / 1e6

    def remove(self) -> None:
        parent = self.path.parent / "cgroup.procs"
        for pid in (self.path / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                parent.write_text(pid)
        with contextlib.suppress(OSError):
            self.path.rmdir()


@contextlib.contextmanager
def burners(count: int) -> Iterator[None]:
    """`count` processes that spin (the machine's load), stopped on the way out."""
    spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for process in spinning:
            process.kill()
        for process in spinning:
            process.wait()


def running(world: OperatorWorld) -> dict[str, set[str]]:
    """pool uid -> its RUNNING instance ids, from one look at the emulator."""
    pools: dict[str, set[str]] = {}
    for item in world.emulator.all_instances():
        if item.get("Gone") or item["InstanceState"] != "RUNNING":
            continue
        for tag in item.get("Tags") or []:
            if tag["Key"] == POOL_TAG:
                pools.setdefault(tag["Value"], set()).add(item["InstanceId"])
    return pools


def counts(log: str) -> dict[str, int]:
    found = {name: len(pattern.findall(log)) for name, pattern in PATTERNS.items()}
    found["killed runs"] = sum(
        len([p for p in match.split(",") if p.strip()]) for match in KILLED.findall(log)
    )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--cpu-quota", type=float, default=1.0, help="cores; 0: no quota")
    parser.add_argument("--burners", type=int, default=0, help="busy processes beside it")
    parser.add_argument("--pools", type=int, default=20)
    parser.add_argument("--size", type=int, default=2)
    parser.add_argument("--share", type=float, default=0.5, help="of the instances, a storm")
    parser.add_argument("--storm-every", type=float, default=60.0)
    parser.add_argument("--lease", type=float, default=6.0, help="the Lease duration, s")
    parser.add_argument("--interval", type=int, default=10, help="the pools' refreshInterval")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep-log", type=Path, help="copy the operator's log here")
    args = parser.parse_args()
    # SIGTERM (a `timeout`) ends the run through its `finally`: the cgroup and the world go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rng = random.Random(args.seed)
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores", flush=True)
    quota = Quota(args.cpu_quota) if args.cpu_quota > 0 else None
    loads: list[float] = []
    storms = reclaimed = 0
    try:
        with (
            tempfile.TemporaryDirectory(prefix="spotpool-lease-load-") as tmp,
            local_world(
                Path(tmp), refresh_seconds=args.interval,
                env={"SPOTPOOL_LEASE_DURATION": f"{args.lease:g}s"},
            ) as world,
        ):  # fmt: skip
            world.start()
            assert world.process is not None
            if quota is not None:
                quota.enter(world.process.pid)
            namespace = world.namespace()
            items = [
                pool_manifest(f"p{n:03d}", replicas=args.size,
                              refreshInterval=f"{args.interval}s")
                for n in range(args.pools)
            ]  # fmt: skip
            world.kube.ok(
                "-n", namespace, "apply", "--server-side", "-f", "-",
                stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
            )  # fmt: skip

            def whole() -> bool:
                pools = running(world)
                return len(pools) >= args.pools and all(len(v) >= args.size for v in pools.values())

            started = time.monotonic()
            world.wait_until(whole, "every pool converged", timeout=1800)
            print(f"  converged in {time.monotonic() - started:.0f} s", flush=True)
            before = counts(world.log.read_text(errors="replace"))
            throttled0 = quota.throttled() if quota else (0, 0, 0.0)
            with burners(args.burners):
                began = time.monotonic()
                end = began + args.minutes * 60
                while time.monotonic() < end:
                    everything = sorted(i for ids in running(world).values() for i in ids)
                    victims = rng.sample(everything, k=int(len(everything) * args.share))
                    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": victims})
                    storms, reclaimed = storms + 1, reclaimed + len(victims)
                    time.sleep(max(0.0, min(args.storm_every, end - time.monotonic())))
                    loads.append(os.getloadavg()[0])
                    now = counts(world.log.read_text(errors="replace"))
                    print(
                        f"  {(time.monotonic() - began) / 60:5.1f} min: storm {storms} "
                        f"({len(victims)} reclaimed), load {loads[-1]:.1f}, "
                        + ", ".join(f"{k} {now[k] - before[k]}" for k in now),
                        flush=True,
                    )
            ran = time.monotonic() - began
            throttled1 = quota.throttled() if quota else (0, 0, 0.0)
            try:
                world.wait_until(whole, "every pool whole after the last storm", timeout=600)
                healed = "every pool whole at the end"
            except AssertionError:
                healed = "NOT every pool whole 10 min after the last storm"
            after = counts(world.log.read_text(errors="replace"))
            if args.keep_log:
                args.keep_log.write_bytes(world.log.read_bytes())
    finally:
        if quota is not None:
            quota.remove()
    periods = throttled1[0] - throttled0[0]
    print(
        f"{ran / 60:.1f} min, {storms} storms ({reclaimed} instances reclaimed), {args.pools} "
        f"pools of {args.size}, Lease {args.lease:g} s, CPU quota "
        f"{f'{args.cpu_quota:g} core(s)' if quota else 'none'}, {args.burners} burners:"
    )
    if quota:
        print(
            f"  throttled {throttled1[1] - throttled0[1]} of {periods} periods, "
            f"{throttled1[2] - throttled0[2]:.0f} s in all"
        )
    if loads:
        print(f"  load average mean {sum(loads) / len(loads):.1f}, max {max(loads):.1f}")
    print("  " + ", ".join(f"{k} {after[k] - before[k]}" for k in after) + f"; {healed}")


if __name__ == "__main__":
    main()
