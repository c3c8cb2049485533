"""Benchmark: the operator as a pod — restarts over many pools, and SIGKILLs under load.

The local world (spotpool.localworld): a local kube-apiserver, the emulator (boot 0), a file
backend, and `spotpool operator run` holding its Lease, each start under a new hostname in a
UTS namespace of its own (`unshare --uts`), as a replaced pod.

1. restart: `--pools` pools of one instance, all converged; the operator stopped (SIGTERM, as
   a rollout does) and started again under another name. Prints the time until every pool is
   watched again (its "no up on resume" line) and how many engine runs the restart made.
2. chaos: `--kills` rounds on `--chaos-pools` pools: each round scales some pools and reclaims
   an instance, SIGKILLs the operator's whole process tree at a random moment (0-`--window` s),
   and starts it under a new hostname. Prints per round the time to converge again, and in
   all: stuck locks, leaked instances (tagged for a pool, not in its status) and duplicated
   slots.

With `--slow-replica S` the chaos runs two sharded replicas (`--shards`) on one backend, replica
A reaching the API server through a TCP proxy that holds every chunk S seconds each way
(spotpool.localworld.slow_proxy), and each round SIGKILLs one of them at random. It prints too
the runs of the two replicas that overlapped on one stack, from their logs
(spotpool.localworld.run_log). The restart part runs one replica: it is skipped then.

    .venv/bin/python bench/restart_chaos.py [--pools 100] [--kills 20] [--chaos-pools 4]
        [--slow-replica 0.15 --shards 4]
"""

import argparse
import contextlib
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spotpool.localworld.operator import OperatorWorld, local_world, pool_manifest  # noqa: E402
from spotpool.localworld.run_log import kill_marker, overlaps, runs  # noqa: E402
from spotpool.localworld.slow_proxy import StallProxy, target_of  # noqa: E402

CRD = ROOT / "crds" / "devops.jokerbai.com_spotpools.yaml"


def _pools(world: OperatorWorld, namespace: str) -> list[dict[str, Any]]:
    reply = json.loads(world.kube.ok("-n", namespace, "get", "spotpools", "-o", "json"))
    return list(reply["items"])


def _all_ready(world: OperatorWorld, namespace: str, wanted: dict[str, int]) -> bool:
    pools = {p["metadata"]["name"]: p for p in _pools(world, namespace)}
    for name, count in wanted.items():
        status = pools[name].get("status") or {}
        if status.get("phase") != "Ready" or status.get("readyReplicas") != count:
            return False
    return True


def _restart_under_a_new_name(world: OperatorWorld, kill: bool) -> None:
    if kill:
        world.kill()
        with world.log.open("a") as log:  # its runs ended no later than now (run_log.py)
            log.write(kill_marker(time.time()))
    else:
        world.stop()
    world.hostname = f"spotpool-operator-{uuid.uuid4().hex[:5]}"
    world.start()


def restart(world: OperatorWorld, pools: int) -> None:
    namespace = world.namespace()
    started = time.monotonic()
    for n in range(pools):
        world.apply(namespace, pool_manifest(f"r-{n}", replicas=1, refreshInterval="10m"))
    world.wait_until(
        lambda: _all_ready(world, namespace, {f"r-{n}": 1 for n in range(pools)}),
        f"{pools} pools Ready", timeout=3600,
    )  # fmt: skip
    print(f"  {pools} pools converged from nothing in {time.monotonic() - started:.0f} s")
    before = world.log.read_text(errors="replace")
    t0 = time.monotonic()
    _restart_under_a_new_name(world, kill=False)
    marker = "the stack already applied this spec: no up on resume"

    def watched() -> int:
        text = world.log.read_text(errors="replace")[len(before) :]
        return text.count(marker)

    world.wait_until(lambda: watched() >= pools, "every pool watched again", timeout=1800)
    elapsed = time.monotonic() - t0
    ups = re.findall(r'spotpool_operations_total\{kind="up",result="\w+"\} (\d+)', world.metrics())
    print(
        f"  restart under a new hostname: all {pools} pools watched in {elapsed:.1f} s "
        f"(operator start included); engine ups run by the restart: {sum(map(int, ups))}"
    )


def chaos(
    world: OperatorWorld,
    pools: int,
    kills: int,
    window: float,
    seed: int,
    others: list[OperatorWorld] | None = None,
) -> None:
    """`others`: more replicas sharing the pools (sharded): each round kills one at random."""
    rng = random.Random(seed)
    replicas = [world, *(others or [])]
    namespace = world.namespace()
    wanted = {f"c-{n}": 2 for n in range(pools)}
    for name, count in wanted.items():
        world.apply(namespace, pool_manifest(name, replicas=count, maximum=5))
    world.wait_until(lambda: _all_ready(world, namespace, wanted), "chaos pools Ready", 900)
    times, leaked, duplicated, stuck = [], 0, 0, 0
    locks = world.directory / "backend" / ".pulumi" / "locks"
    for n in range(kills):
        for name in rng.sample(sorted(wanted), k=max(1, pools // 2)):
            wanted[name] = rng.randint(1, 4)
            world.apply(namespace, pool_manifest(name, replicas=wanted[name], maximum=5))
        victim_pool = rng.choice(sorted(wanted))
        status = world.status(namespace, victim_pool)
        if status.get("instances"):
            victim = status["instances"][0]["instanceId"]
            world.emulator.admin("POST", "/_emulator/reclaim", {"InstanceIds": [victim]})
        time.sleep(rng.uniform(0, window))
        t0 = time.monotonic()
        killed = rng.randrange(len(replicas))
        _restart_under_a_new_name(replicas[killed], kill=True)
        world.wait_until(lambda: _all_ready(world, namespace, wanted), "converged", 900)
        times.append(time.monotonic() - t0)
        for name in wanted:
            pool = world.get(namespace, name) or {}
            uid = pool["metadata"]["uid"]
            ids = [i["instanceId"] for i in pool.get("status", {}).get("instances") or []]
            cloud = world.cloud(uid)
            leaked += len(set(cloud) - set(ids))
            slots = [i.get("slot") for i in pool.get("status", {}).get("instances") or []]
            duplicated += len(slots) - len(set(slots))
        stuck += sum(1 for _ in locks.glob(f"**/{namespace}.*/*.json"))
        which = f" (replica {killed} killed)" if len(replicas) > 1 else ""
        print(f"  kill {n + 1:2d}{which}: converged again in {times[-1]:5.1f} s", flush=True)
    print(
        f"  {kills} SIGKILLs with a hostname change each: converge p50 "
        f"{statistics.median(times):.1f} s, max {max(times):.1f} s; stuck locks {stuck}, "
        f"leaked instances {leaked}, duplicated slots {duplicated}"
    )
    if len(replicas) > 1:
        logs = {f"replica {n}": r.log for n, r in enumerate(replicas)}
        found, count = overlaps(logs, time.time())
        each = ", ".join(
            f"{name} {sum(len(s) for s in runs(log, time.time()).values())}"
            for name, log in logs.items()
        )
        print(f"  {count} engine runs by {len(replicas)} replicas ({each}); overlapping on one "
              f"stack: {len(found)}")  # fmt: skip
        for overlap in found:
            print(f"    overlap: {overlap}")


@contextlib.contextmanager
def _slow(world: OperatorWorld, delay: float) -> Iterator[Path]:
    """A kubeconfig whose API server is reached through a proxy adding `delay` s per chunk."""
    proxy = StallProxy(*target_of(world.kube.kubeconfig))
    proxy.delay = delay
    try:
        yield proxy.kubeconfig(world.kube.kubeconfig, world.directory / "kubeconfig-slow")
    finally:
        proxy.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=100)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--chaos-pools", type=int, default=4)
    parser.add_argument("--window", type=float, default=6.0)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--slow-replica", type=float, default=0.0, metavar="SECONDS",
                        help="chaos with two replicas, A's API-server connection this much "
                        "slower each way per chunk (0: one replica)")  # fmt: skip
    parser.add_argument("--shards", type=int, default=4)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
    with (
        tempfile.TemporaryDirectory(prefix="spotpool-bench-") as tmp,
        local_world(
            Path(tmp), boot_seconds=0, refresh_seconds=600, hostname="spotpool-operator-first"
        ) as world,
        contextlib.ExitStack() as stack,  # left first: replica B and the proxy stop first
    ):
        others: list[OperatorWorld] = []
        if args.slow_replica > 0:
            proxy = stack.enter_context(_slow(world, args.slow_replica))
            backend = f"file://{world.directory / 'backend'}"
            shards = {"SPOTPOOL_SHARDS": str(args.shards)}
            world.env = {**shards, "KUBECONFIG": str(proxy)}
            (world.directory / "b").mkdir()
            b = OperatorWorld(
                world.kube, world.emulator, world.directory / "b", refresh_seconds=600,
                hostname="spotpool-operator-b-first", backend_url=backend, env=shards,
            )  # fmt: skip
            others.append(b)
            stack.callback(b.stop)
        world.start()
        for other in others:
            other.start()
        if args.pools and others:
            print("restart: skipped (it runs one replica)")
        elif args.pools:
            print(f"restart over {args.pools} converged pools:")
            restart(world, args.pools)
        if args.kills:
            print(f"chaos: {args.kills} kills over {args.chaos_pools} pools:")
            slow = f" (replica 0 slowed {args.slow_replica} s each way)" if others else ""
            print(f"  {1 + len(others)} replica(s){slow}")
            chaos(world, args.chaos_pools, args.kills, args.window, args.seed, others)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
