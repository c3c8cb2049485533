"""Benchmark: scale-out — N pools sharded across 1, 2 and 4 operator replicas on one S3 backend.

The local world (spotpool.localworld): a local kube-apiserver, the emulator (boot 0), versitygw
as the shared `s3://` backend, and R `spotpool operator run` processes, each under a hostname of
its own (`unshare --uts`, as pods), dividing `--shards` shard Leases. For each replica count:

1. converge: `--pools` pools of 1-2 instances (alternating) applied at once; the time until
   every pool is Ready;
2. idle: over `--idle` seconds (refresh interval `--interval`), CPU % of a core and RSS of each
   replica's process tree;
3. storm (for the largest replica count, measured first): `--storm` of all instances reclaimed
   at once; the time until every one is replaced, and the capacity gap (desired - ready, all
   pools) sampled over time — plotted to `--plot`;
4. failover (for the largest replica count): one replica SIGKILLed with its whole tree and an
   instance of each of its pools reclaimed; the time until its shards are held again, and
   until those pools are whole again.

    .venv/bin/python bench/scale.py [--pools 1000] [--replicas 4,2,1] [--shards 16]
                                    [--secrets-provider keyserver]

Converging a pool costs about 0.6 CPU-seconds of the operator's tree (its one `up` with the
CLI and plugin; 3.8-4.2 CPU-s before the lean engine, 1.2 before the lean CLI and plugin) and
0.86 machine-wide, so N pools cost about 0.9N CPU-seconds to converge whatever the replica
count: replicas spread the work across cores and nodes, which one 2-core machine has few of.
The figures say what the cores allowed. The bench watches the pools (bench/pool_watch.py).
"""

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import cpu_split  # noqa: E402
from bench.plots import capacity_gap_over_time  # noqa: E402
from bench.pool_watch import PoolWatch  # noqa: E402
from spotpool.cluster import s3  # noqa: E402
from spotpool.localworld.emulator import wait_until  # noqa: E402
from spotpool.localworld.operator import OperatorWorld, local_world, pool_manifest  # noqa: E402


def _sizes(pools: int) -> dict[str, int]:
    return {f"p-{n}": 1 + n % 2 for n in range(pools)}


def _listed(pools: dict[str, dict[str, Any]]) -> set[str]:
    return {
        i["instanceId"]
        for p in pools.values()
        for i in (p.get("status") or {}).get("instances") or []
    }


def _ready(pool: dict[str, Any], count: int) -> bool:
    status = pool.get("status") or {}
    return status.get("phase") == "Ready" and status.get("readyReplicas") == count


def _gap(pools: dict[str, dict[str, Any]], wanted: dict[str, int]) -> int:
    ready = sum(int((p.get("status") or {}).get("readyReplicas") or 0) for p in pools.values())
    return sum(wanted.values()) - ready


def _held(world: OperatorWorld) -> set[int]:
    found = re.findall(r'^spotpool_shard_held\{shard="(\d+)"\} 1\.0$', world.metrics(), re.M)
    return {int(s) for s in found}


def _tree(world: OperatorWorld) -> list[psutil.Process]:
    assert world.process is not None
    root = psutil.Process(world.process.pid)
    return [root, *root.children(recursive=True)]


def _idle(replicas: list[OperatorWorld], seconds: float) -> list[tuple[float, float]]:
    """(CPU % of one core, RSS MiB) of each replica's process tree over `seconds`."""
    start = {}
    for world in replicas:
        start[id(world)] = sum(_cpu(p) for p in _tree(world))
    time.sleep(seconds)
    result = []
    for world in replicas:
        tree = _tree(world)
        cpu = sum(_cpu(p) for p in tree) - start[id(world)]
        rss = sum(_rss(p) for p in tree) / 2**20
        result.append((100 * cpu / seconds, rss))
    return result


def _cpu(process: psutil.Process) -> float:
    try:
        times = process.cpu_times()
        return float(times.user + times.system + times.children_user + times.children_system)
    except psutil.Error:
        return 0.0


def _rss(process: psutil.Process) -> float:
    try:
        return float(process.memory_info().rss)
    except psutil.Error:
        return 0.0


def phase(work: Path, replicas: int, args: argparse.Namespace, last: bool) -> dict[str, Any]:
    figures: dict[str, Any] = {"replicas": replicas}
    with local_world(work, boot_seconds=0, lease_namespace=None) as base, ExitStack() as stack:
        server = s3.start(work / "s3")
        lease_namespace = f"bench-{uuid.uuid4().hex[:6]}"
        base.kube.ok("create", "namespace", lease_namespace)
        worlds: list[OperatorWorld] = []
        try:
            for r in range(replicas):
                directory = work / f"replica-{r}"
                directory.mkdir()
                world = OperatorWorld(
                    base.kube, base.emulator, directory, refresh_seconds=args.interval,
                    hostname=f"spotpool-operator-{r}-{uuid.uuid4().hex[:4]}",
                    lease_namespace=lease_namespace, backend_url=server.backend_url,
                    backend_env=server.env, namespace_prefix="sc-",
                    env={"SPOTPOOL_SHARDS": str(args.shards),
                         "SPOTPOOL_MAX_CONCURRENT": str(args.max_concurrent),
                         "SPOTPOOL_LEASE_DURATION": f"{args.lease:.0f}s",
                         "SPOTPOOL_SECRETS_PROVIDER": args.secrets_provider},
                )  # fmt: skip
                world.start()
                worlds.append(world)
            namespace = worlds[0].namespace()
            wanted = _sizes(args.pools)
            items = [
                {**pool_manifest(name, replicas=count, maximum=4),
                 "metadata": {"name": name, "namespace": namespace}}
                for name, count in wanted.items()
            ]  # fmt: skip
            watch = stack.enter_context(PoolWatch(base.kube, namespace))
            started = time.monotonic()
            base.kube.ok("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1",
                         "kind": "List", "items": items}))  # fmt: skip

            shown = [started]

            def all_ready() -> bool:
                pools = watch.snapshot()
                ready = sum(_ready(pools.get(n, {}), c) for n, c in wanted.items())
                if time.monotonic() - shown[0] >= 60:  # progress, should the run be cut short
                    shown[0] = time.monotonic()
                    print(f"    {ready} of {args.pools} Ready after "
                          f"{shown[0] - started:.0f} s", flush=True)  # fmt: skip
                return ready == len(wanted)

            cpu_before = sum(_cpu(p) for w in worlds for p in _tree(w))
            machine_before = cpu_split.snapshot()
            wait_until(all_ready, f"{args.pools} pools Ready", args.timeout, every=args.look)
            figures["converge_s"] = time.monotonic() - started
            cpu = sum(_cpu(p) for w in worlds for p in _tree(w)) - cpu_before
            machine = cpu_split.split(machine_before, cpu_split.snapshot())
            print(f"  {replicas} replica(s): {args.pools} pools ({sum(wanted.values())} "
                  f"instances) converged from nothing in {figures['converge_s']:.0f} s "
                  f"({60 * args.pools / figures['converge_s']:.0f} pools a minute; the "
                  f"replicas' trees used {cpu / args.pools:.1f} CPU-s a pool)",
                  flush=True)  # fmt: skip
            print(f"    machine-wide {cpu_split.line(machine, args.pools, ' a pool')}", flush=True)
            time.sleep(10)  # the last status writes and watches settle
            idle = _idle(worlds, args.idle)
            figures["idle"] = idle
            for r, (cpu, rss) in enumerate(idle):
                print(f"    replica {r}: idle {cpu:.1f} % of a core, RSS {rss:.0f} MiB "
                      f"(process tree), shards {sorted(_held(worlds[r]))}")  # fmt: skip
            if last:
                figures |= storm(base, worlds, watch, wanted, args)
                if replicas > 1:
                    figures |= failover(base, worlds, watch, wanted, args)
        finally:
            for world in worlds:
                world.stop()
            server.stop()
    return figures


def storm(
    base: OperatorWorld, worlds: list[OperatorWorld], watch: PoolWatch, wanted: dict[str, int],
    args: argparse.Namespace,
) -> dict[str, Any]:  # fmt: skip
    pools = watch.snapshot()
    instances = [i["instanceId"] for p in pools.values() for i in p["status"]["instances"]]
    count = max(1, round(len(instances) * args.storm))
    victims = instances[:: max(1, len(instances) // count)][:count]
    started = time.monotonic()
    base.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": victims})
    series: list[tuple[float, int]] = []
    gone = set(victims)

    def replaced() -> bool:
        pools = watch.snapshot()
        series.append((time.monotonic() - started, _gap(pools, wanted)))
        listed = {
            i["instanceId"] for p in pools.values() for i in p["status"].get("instances") or []
        }
        return not (listed & gone) and all(_ready(pools[n], c) for n, c in wanted.items())

    base.wait_until(replaced, "every reclaimed instance replaced", timeout=args.timeout)
    took = time.monotonic() - started
    print(f"  storm: {count} of {len(instances)} instances reclaimed at once, all replaced "
          f"in {took:.0f} s (gap peak {max(g for _, g in series)})", flush=True)  # fmt: skip
    _plot(series, args, count, len(worlds))
    return {"storm_s": took, "storm_instances": count}


def _plot(series: list[tuple[float, int]], args: argparse.Namespace, count: int,
          replicas: int) -> None:  # fmt: skip
    (args.plot.parent).mkdir(parents=True, exist_ok=True)
    title = (f"Reclaim storm: {count} instances of {args.pools} pools, {replicas} replicas "
             f"({os.cpu_count()} cores)")  # fmt: skip
    capacity_gap_over_time(
        [(t, float(g)) for t, g in series], args.plot, title=title, marks=[(0.0, "reclaims")]
    )
    print(f"  wrote {args.plot}")


def failover(
    base: OperatorWorld, worlds: list[OperatorWorld], watch: PoolWatch, wanted: dict[str, int],
    args: argparse.Namespace,
) -> dict[str, Any]:  # fmt: skip
    from spotpool_operator.replicas.sharding import shard_of

    victim = max(worlds, key=lambda w: len(_held(w)))
    theirs = _held(victim)
    pools = watch.snapshot()
    orphaned = [
        n for n, p in pools.items() if shard_of(p["metadata"]["uid"], args.shards) in theirs
    ]
    gone = {pools[n]["status"]["instances"][0]["instanceId"] for n in orphaned}
    started = time.monotonic()
    victim.kill()
    base.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": sorted(gone)})
    survivors = [w for w in worlds if w is not victim]
    base.wait_until(
        lambda: set().union(*(_held(w) for w in survivors)) == set(range(args.shards)),
        "the killed replica's shards held again", timeout=300,
    )  # fmt: skip
    held = time.monotonic() - started

    def whole() -> bool:
        pools = watch.snapshot()
        listed = {
            i["instanceId"] for p in pools.values() for i in p["status"].get("instances") or []
        }
        return not (listed & gone) and all(_ready(pools[n], wanted[n]) for n in orphaned)

    base.wait_until(whole, "the killed replica's pools whole again", timeout=args.timeout)
    took = time.monotonic() - started
    print(f"  failover: a replica with {len(theirs)} shards ({len(orphaned)} pools) SIGKILLed "
          f"and one instance of each of its pools reclaimed: shards held again in {held:.1f} s, "
          f"its pools whole again in {took:.1f} s (Lease {args.lease:.0f} s)")  # fmt: skip
    return {"failover_held_s": held, "failover_whole_s": took}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=1000)
    parser.add_argument("--replicas", default="4,2,1", help="replica counts, comma-separated")
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--interval", type=int, default=60, help="refresh interval (s)")
    parser.add_argument("--idle", type=float, default=60.0, help="idle window (s)")
    parser.add_argument("--storm", type=float, default=0.1, help="share of instances reclaimed")
    parser.add_argument("--lease", type=float, default=15.0, help="Lease duration (s)")
    parser.add_argument("--max-concurrent", type=int, default=3)
    parser.add_argument(
        "--secrets-provider", choices=["passphrase", "keyserver"], default="passphrase",
        help="the new stacks' secrets provider (keyserver: no key derivation per Pulumi run)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument(
        "--look", type=float, default=1.0, help="seconds between looks at the pools converging"
    )
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "scale-storm.png")
    args = parser.parse_args()
    counts = [int(c) for c in args.replicas.split(",")]
    # Stopped by a signal, clean up the world (a background job ignores SIGINT otherwise).
    for stop in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop, signal.default_int_handler)
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores; "
          f"{args.pools} pools, {args.shards} shards")  # fmt: skip
    results = []
    for replicas in counts:  # the storm and failover run with the largest count
        with tempfile.TemporaryDirectory(prefix="spotpool-scale-") as tmp:
            results.append(phase(Path(tmp), replicas, args, last=replicas == max(counts)))
    print("\nreplicas  converge  idle CPU % (each)        RSS MiB (each)")
    for figures in results:
        cpu = ", ".join(f"{c:.1f}" for c, _ in figures["idle"])
        rss = ", ".join(f"{r:.0f}" for _, r in figures["idle"])
        print(f"{figures['replicas']:>8}  {figures['converge_s']:>7.0f}s  {cpu:<24} {rss}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
