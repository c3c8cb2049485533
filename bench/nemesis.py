"""Benchmark: nemeses, in the manner of Jepsen's, against sharded replicas on one S3 backend.

The local world (spotpool.localworld) with versitygw as the shared `s3://` backend and
`--replicas` operator replicas (`--shards` shards, Lease `--lease` s), replica `a` reaching the
API server through a TCP proxy that can stall its connection. `--pools` pools of one instance.
Each round: every RUNNING instance of the install is reclaimed at once (a storm), and at a
random moment of the next `--window` s one fault strikes, the faults taken in turn:

- freeze-up, freeze-launch, freeze-bucket: one replica's whole process tree is stopped
  (SIGSTOP) for 2.5 Leases, then thawed, the moment it has a Pulumi `up` under way
  (`freeze-up`), a fast-path launch under way past the account's RunInstances bucket, its
  bucket not empty (`freeze-launch`: the launch is in its cloud calls), or a fast-path launch
  waiting at that bucket, the bucket in debt (`freeze-bucket`: the bucket is slow,
  `--run-rate`, so a storm's launches queue there; read from the replica's
  `spotpool_cloud_api_bucket_fill_ratio`); the replica with the most such runs is chosen;
- partition: replica a's connection to the API server stalls for 2.5 Leases, then heals;
- clock-jump: one replica's wall clock jumps `--jump` s ahead for 2.5 Leases, then back (the
  clock its Leases' times are written in, `SPOTPOOL_CLOCK_OFFSET_FILE`; its monotonic and
  boot clocks, which time the Leases, are left alone, as an NTP step leaves them);
- join-leave: a replica leaves (SIGTERM, as a rollout) and a new one joins under a new name;
- delete: a third of the pools are deleted mid-storm (new ones replace them next round).

A fault hits when it strikes what it aims at: a freeze, partition, clock jump or leave a
replica with runs of its kind in flight (each waits up to `--window` s for one), a delete pools
still being replaced. A round whose fault found nothing to hit is printed (`hit` no) but not
counted: the summary counts, per fault, only the rounds that hit.

Then the world settles (every pool Ready at its size, every deleted pool gone) and is checked:
slots that ever had two instances alive at once (the emulator's history, to the microsecond),
live instances of the install that no stack tracks, instances a stack tracks that the cloud no
longer runs, locks left, pools not whole, statuses naming an instance
that is not RUNNING, stacks whose preview shows changes (`spotpool preview --all-stacks`, the
`--expect-no-changes` of every stack); and what the fences did: runs in flight at the freeze,
calls and backend requests refused, late checkpoint saves refused. One line a round.

    .venv/bin/python bench/nemesis.py [--rounds 8] [--replicas 2] [--pools 8] [--shards 4]
        [--faults freeze-up,partition,...] [--seed N]
"""

import argparse
import contextlib
import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spotpool.api.stackconfig import PROJECT, TAG_POOL_UID, TAG_SLOT  # noqa: E402
from spotpool.cluster import s3  # noqa: E402
from spotpool.engine.state.backend_files import ROOT as STATE  # noqa: E402
from spotpool.engine.state.backend_files import (  # noqa: E402
    BackendFiles,
    latest_deployment,
    open_backend,
)
from spotpool.localworld import run_log  # noqa: E402
from spotpool.localworld.emulator import SECRET_ID, SECRET_KEY  # noqa: E402
from spotpool.localworld.operator import (  # noqa: E402
    PASSPHRASE,
    OperatorWorld,
    local_world,
    pool_manifest,
)
from spotpool.localworld.slow_proxy import StallProxy, target_of  # noqa: E402

FAULTS = (
    "freeze-up",
    "freeze-launch",
    "freeze-bucket",
    "partition",
    "clock-jump",
    "join-leave",
    "delete",
)
RUN_EDGE = re.compile(r"\] (?P<what>\w+) of (?P<stack>\S+) (?P<edge>begins|ends)$")
INSTANCE = "tencentcloud:Instance/instance:Instance"
GONE = {"TERMINATING", "SHUTDOWN", "LAUNCH_FAILED"}


class Cluster:
    """The replicas, the pools and the backend of one nemesis run."""

    def __init__(self, first: OperatorWorld, server: s3.LocalS3, args: argparse.Namespace):
        self.first, self.server, self.args = first, server, args
        self.kube, self.emulator, self.work = first.kube, first.emulator, first.directory
        self.files: BackendFiles = open_backend(server.backend_url, server.env)  # type: ignore
        self.leases = f"nemesis-{uuid.uuid4().hex[:6]}"
        self.kube.ok("create", "namespace", self.leases)
        self.proxy = StallProxy(*target_of(self.kube.kubeconfig))
        self.replicas: dict[str, OperatorWorld] = {}
        self.joined = 0
        self.proxied = ""  # the replica that reaches the API server through the proxy
        self.namespace = ""
        self.pools: dict[str, str] = {}  # name -> uid

    def join(self, via_proxy: bool = False) -> OperatorWorld:
        self.joined += 1
        name = f"r{self.joined}"
        env = {"SPOTPOOL_SHARDS": str(self.args.shards),
               "SPOTPOOL_LEASE_DURATION": f"{self.args.lease:.0f}s"}  # fmt: skip
        if self.args.run_rate:
            env["SPOTPOOL_API_LIMITS"] = f"RunInstances={self.args.run_rate}"
        clock = self.work / f"{name}.clock"  # its wall clock's offset, movable (clock-jump)
        clock.write_text("0\n")
        env["SPOTPOOL_CLOCK_OFFSET_FILE"] = str(clock)
        if via_proxy:
            self.proxied = name
            env["KUBECONFIG"] = str(
                self.proxy.kubeconfig(self.kube.kubeconfig, self.work / "kubeconfig-via-proxy")
            )
        (self.work / name).mkdir()
        world = OperatorWorld(
            self.kube, self.emulator, self.work / name, refresh_seconds=300,
            hostname=f"spotpool-operator-{name}-{uuid.uuid4().hex[:4]}",
            lease_namespace=self.leases, backend_url=self.server.backend_url,
            backend_env=self.server.env, namespace_prefix="nemesis-", env=env,
        )  # fmt: skip
        world.start()
        self.replicas[name] = world
        return world

    def leave(self, name: str) -> None:
        self.replicas.pop(name).stop()

    # --- the pools ---------------------------------------------------------------------------
    def fill(self) -> None:
        """Pools up to --pools (new names for those deleted)."""
        if not self.namespace:
            self.namespace = self.first.namespace()
        while len(self.pools) < self.args.pools:
            name = f"pool-{uuid.uuid4().hex[:6]}"
            self.first.apply(self.namespace, pool_manifest(name, replicas=1))
            self.pools[name] = ""

    def listed(self) -> dict[str, dict[str, Any]]:
        found = self.kube.ok("-n", self.namespace, "get", "spotpools", "-o", "json")
        return {p["metadata"]["name"]: p for p in json.loads(found)["items"]}

    def settled(self) -> bool:
        """Every pool Ready, its status naming exactly its one RUNNING instance in the cloud;
        every deleted pool gone; no lock."""
        pools = self.listed()
        if set(pools) != set(self.pools) or self.files.keys(f"{STATE}/locks/"):
            return False
        running: dict[str, set[str]] = {}
        for item in self.emulator.all_instances():
            if item["InstanceState"] == "RUNNING" and not item.get("Gone"):
                running.setdefault(_tag(item, TAG_POOL_UID), set()).add(item["InstanceId"])
        for name, pool in pools.items():
            status = pool.get("status") or {}
            if status.get("phase") != "Ready" or status.get("readyReplicas") != 1:
                return False
            if status.get("observedGeneration") != pool["metadata"]["generation"]:
                return False
            named = {i["instanceId"] for i in status.get("instances") or []}
            if len(named) != 1 or named != running.get(pool["metadata"]["uid"], set()):
                return False
            self.pools[name] = pool["metadata"]["uid"]
        return True

    def wait_settled(self, timeout: float) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.settled():
                return time.monotonic() - started
            time.sleep(1)
        return float("nan")

    # --- the faults --------------------------------------------------------------------------
    def storm(self) -> int:
        live = [i["InstanceId"] for i in self.emulator.all_instances()
                if i["InstanceState"] == "RUNNING" and _tag(i, TAG_POOL_UID)]  # fmt: skip
        if live:
            self.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": live})
        return len(live)

    def strike(self, fault: str) -> dict[str, Any]:
        """Strike `fault`; returns the victim, the runs it had in flight, and whether it hit."""
        hold = 2.5 * self.args.lease
        if fault.startswith("freeze"):
            name, in_flight = self.busiest(self.replicas, fault, self.args.window)
            world = self.replicas[name]
            with frozen(world):
                time.sleep(hold)
            return {"victim": name, "in_flight": in_flight, "hit": in_flight > 0}
        if fault == "clock-jump":
            name, in_flight = self.busiest(self.replicas, "any", self.args.window)
            clock = self.work / f"{name}.clock"
            clock.write_text(f"{self.args.jump:.0f}\n")
            time.sleep(hold)
            clock.write_text("0\n")
            return {"victim": name, "in_flight": in_flight, "hit": in_flight > 0}
        if fault == "partition":
            name, in_flight = self.busiest([self.proxied], "any", self.args.window)
            self.proxy.stalled.set()
            time.sleep(hold)
            self.proxy.stalled.clear()
            return {"victim": name, "in_flight": in_flight, "hit": in_flight > 0}
        if fault == "join-leave":
            others = [n for n in self.replicas if n != self.proxied] or [self.proxied]
            name, in_flight = self.busiest(others, "any", self.args.window)
            self.leave(name)
            self.join(via_proxy=name == self.proxied)
            return {"victim": name, "in_flight": in_flight, "hit": in_flight > 0}
        listed = self.listed()
        doomed = random.sample(sorted(self.pools), max(1, len(self.pools) // 3))
        mid_storm = sum(not _whole(listed.get(name, {})) for name in doomed)
        for name in doomed:
            self.kube.run("-n", self.namespace, "delete", "spotpool", name, "--wait=false")
            self.pools.pop(name)
        return {"victim": f"{len(doomed)} pools", "in_flight": mid_storm, "hit": mid_storm > 0}

    def busiest(self, names: Iterable[str], aim: str, wait: float) -> tuple[str, int]:
        """Of `names`, the replica with the most runs of the `aim` (RUN_KINDS' kinds, or
        "any" run) under way, waiting up to `wait` s for one to show (else the busiest now,
        with 0); and how many it has."""
        deadline = time.monotonic() + wait
        while True:
            counts = {n: self.aimed(self.replicas[n], aim) for n in names}
            name = max(counts, key=lambda n: counts[n])
            if counts[name] or time.monotonic() > deadline:
                return name, counts[name]
            time.sleep(0.05)

    def aimed(self, world: OperatorWorld, aim: str) -> int:
        """The runs of `world` that `aim` strikes now: its open runs of the kinds, and for the
        launch faults only while its RunInstances bucket is (freeze-bucket) or is not
        (freeze-launch) in debt, i.e. a launch waits there for a token."""
        if aim == "any":
            return _open_runs(world.log)
        runs = _open_runs(world.log, RUN_KINDS[aim])
        if not runs or aim == "freeze-up":
            return runs
        queued = _bucket_empty(world, "RunInstances")
        return runs if queued == (aim == "freeze-bucket") else 0

    # --- the checks --------------------------------------------------------------------------
    def check(self, since: float = 0.0) -> dict[str, int]:
        """The findings; `since`: the round's start (epoch), its duplicates only."""
        instances = self.emulator.all_instances()
        ours = [i for i in instances if _tag(i, TAG_POOL_UID)]
        live = {i["InstanceId"]: i for i in ours
                if not i.get("Gone") and i["InstanceState"] not in GONE}  # fmt: skip
        tracked: set[str] = set()
        for key in self.files.keys(f"{STATE}/stacks/{PROJECT}/"):
            if key.endswith(".json.gz"):
                stack = key.rsplit("/", 1)[1].removesuffix(".json.gz")
                state = latest_deployment(self.files, PROJECT, stack) or {}
                tracked |= {str(r.get("id")) for r in state.get("resources") or []
                            if r.get("type") == INSTANCE}  # fmt: skip
        running = {i for i, item in live.items() if item["InstanceState"] == "RUNNING"}
        pools = self.listed()
        not_whole = not_running = 0
        for pool in pools.values():
            status = pool.get("status") or {}
            named = {i["instanceId"] for i in status.get("instances") or []}
            uid = pool["metadata"]["uid"]
            cloud = {i for i, item in live.items() if _tag(item, TAG_POOL_UID) == uid}
            not_whole += named != cloud or len(cloud) != 1
            not_running += sum(live.get(i, {}).get("InstanceState") != "RUNNING" for i in named)
        logs = [w.log.read_text(errors="replace") for w in self.replicas.values()]
        return {
            "duplicates": _overlapping_slots(ours, since),
            "untracked": len(set(live) - tracked),
            "tracked_gone": len(tracked - running),  # the state names what the cloud no longer runs
            "locks": len(self.files.keys(f"{STATE}/locks/")),
            "not_whole": not_whole,
            "not_running": not_running,
            "changed_stacks": self.previews_with_changes(),
            "refused": sum(log.count(" refused: ") for log in logs),
            "late_saves": sum(log.count("a late writer's save refused") for log in logs),
        }

    def previews_with_changes(self) -> int:
        env = {
            **os.environ, **self.server.env,
            "SPOTPOOL_BACKEND_URL": self.server.backend_url,
            "SPOTPOOL_CLOUD_ENDPOINT": self.emulator.endpoint,
            "SPOTPOOL_WORK_DIR": str(self.work / "preview"),
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "TENCENTCLOUD_SECRET_ID": SECRET_ID, "TENCENTCLOUD_SECRET_KEY": SECRET_KEY,
            # the replicas' install (their Lease's namespace and name): tags as they make them
            "SPOTPOOL_INSTALL_ID": f"{self.leases}.spotpool-operator",
        }  # fmt: skip
        done = subprocess.run(
            [str(ROOT / ".venv" / "bin" / "spotpool"), "preview", "--all-stacks",
             "--format", "json"],
            env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        if done.returncode not in (0, 2):
            print(f"  preview failed: {done.stderr.strip()[-300:]}")
            return -1
        changed = {
            p["stack"]: {k: v for k, v in c.items() if v and k != "same"}
            for p in json.loads(done.stdout)["pools"]
            if (c := p.get("changes")) and any(c[k] for k in ("create", "update", "replace",
                                                               "delete"))
        }  # fmt: skip
        if changed:
            print(f"  preview shows changes: {changed}", flush=True)
        return len(changed)


@contextlib.contextmanager
def frozen(world: OperatorWorld) -> Iterator[None]:
    assert world.process is not None
    root = psutil.Process(world.process.pid)
    tree = [root, *root.children(recursive=True)]
    for process in tree:
        with contextlib.suppress(psutil.Error):
            process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        for process in tree:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGCONT)


def _tag(instance: dict[str, Any], key: str) -> str:
    return next((t["Value"] for t in instance.get("Tags") or [] if t["Key"] == key), "")


# What a freeze waits for in the victim's log: a Pulumi up, a fast-path launch (which in a
# storm at a slow --run-rate spends most of its time waiting at the RunInstances bucket: the
# bucket's fill tells a launch queued there from one in its cloud calls).
RUN_KINDS = {
    "freeze-up": ("up", "replace_slots", "converge", "resume"),
    "freeze-launch": ("launch_replacements",),
    "freeze-bucket": ("launch_replacements",),
}
BUCKET_FILL = re.compile(
    r"^spotpool_cloud_api_bucket_fill_ratio\{(?P<labels>[^}]*)\} (?P<value>\S+)$", re.M
)


def _bucket_empty(world: OperatorWorld, action: str) -> bool:
    """Whether the replica's bucket of `action` is empty now (a caller waits for a token):
    its metrics' fill ratio, the lowest over its key pairs and accounts, at 0."""
    try:
        text = world.metrics()
    except OSError:
        return False
    fills = [float(m["value"]) for m in BUCKET_FILL.finditer(text)
             if f'action="{action}"' in m["labels"]]  # fmt: skip
    return bool(fills) and min(fills) <= 0.0


def _whole(pool: dict[str, Any]) -> bool:
    status = pool.get("status") or {}
    return status.get("phase") == "Ready" and status.get("readyReplicas") == 1


def _open_runs(log: Path, kinds: tuple[str, ...] = ()) -> int:
    """Engine runs (of these kinds; any) under way in a replica now: begun, not ended since
    its last start, in its log."""
    depth: dict[tuple[str, str], int] = {}
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith(run_log.START):
            depth.clear()
        elif (found := RUN_EDGE.search(line)) is not None:
            key = (found["what"], found["stack"])
            depth[key] = depth.get(key, 0) + (1 if found["edge"] == "begins" else -1)
    return sum(n for (what, _), n in depth.items() if n > 0 and (not kinds or what in kinds))


def _seconds(stamp: str | None) -> float:
    if not stamp:
        return float("inf")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _lifetime(item: dict[str, Any]) -> tuple[float, float]:
    """From creation until gone: the emulator's unrounded moments (`CreatedAt`, `GoneAt`),
    else its API times (to the second)."""
    created = item.get("CreatedAt")
    born = float(created) if created is not None else _seconds(item.get("CreatedTime"))
    if item.get("GoneAt") is not None:
        return born, float(item["GoneAt"])
    return born, _seconds(item.get("GoneTime")) if item.get("Gone") else float("inf")


def _overlapping_slots(instances: list[dict[str, Any]], since: float = 0.0) -> int:
    """Slots (pool uid, slot) that had two instances alive at one moment, that moment at or
    after `since` (a round's start: an overlap of an earlier round is that round's, never
    counted again): each instance alive from its creation until it was gone (the emulator's
    history, unrounded: an instance made half a second before the one it replaces went
    counts)."""
    by_slot: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for item in instances:
        if item["InstanceState"] == "LAUNCH_FAILED":
            continue
        by_slot.setdefault((_tag(item, TAG_POOL_UID), _tag(item, TAG_SLOT)), []).append(
            _lifetime(item)
        )
    doubled = 0
    for spans in by_slot.values():
        spans.sort()
        doubled += any(since <= b[0] < a[1] for a, b in itertools.pairwise(spans))
    return doubled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--pools", type=int, default=8)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--lease", type=float, default=6.0)
    parser.add_argument("--window", type=float, default=6.0)
    parser.add_argument("--settle", type=float, default=420.0)
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--jump", type=float, default=3600.0, help="clock-jump, seconds ahead")
    parser.add_argument(
        "--run-rate",
        type=float,
        default=1.0,
        help="RunInstances a second for the account (0: the default)",
    )
    args = parser.parse_args()
    random.seed(args.seed)
    faults = [f for f in args.faults.split(",") if f]
    with tempfile.TemporaryDirectory(prefix="nemesis-") as tmp:
        work = Path(tmp)
        server = s3.start(work / "s3")
        try:
            with local_world(
                work, boot_seconds=0, lease_namespace=None, namespace_prefix="nemesis-"
            ) as first:
                cluster = Cluster(first, server, args)
                try:
                    run(cluster, faults, args)
                finally:
                    for world in cluster.replicas.values():
                        world.stop()
                    cluster.proxy.close()
        finally:
            server.stop()


def run(cluster: Cluster, faults: list[str], args: argparse.Namespace) -> None:
    cluster.join(via_proxy=True)
    for _ in range(args.replicas - 1):
        cluster.join()
    cluster.fill()
    first = cluster.wait_settled(600)
    print(f"{args.pools} pools on {args.replicas} replicas, {args.shards} shards, "
          f"Lease {args.lease:.0f} s: first converge {first:.0f} s")  # fmt: skip
    header = ("round", "fault", "victim", "in_flight", "hit", "reclaimed", "settle_s",
              "duplicates", "untracked", "tracked_gone", "locks", "not_whole", "not_running",
              "changed_stacks", "refused", "late_saves")  # fmt: skip
    print("\t".join(header))
    hits: dict[str, int] = {f: 0 for f in faults}
    tried: dict[str, int] = {f: 0 for f in faults}
    hit_counts: list[dict[str, int]] = []  # the checks' findings of the rounds that hit
    for number in range(1, args.rounds + 1):
        fault = faults[(number - 1) % len(faults)]
        began = time.time()  # the emulator's clock is this host's: this round's overlaps
        cluster.fill()
        cluster.wait_settled(args.settle)
        reclaimed = cluster.storm()
        time.sleep(random.uniform(0, args.window))
        struck = cluster.strike(fault)
        settle = cluster.wait_settled(args.settle)
        counts = cluster.check(began)
        tried[fault] += 1
        if struck["hit"]:
            hits[fault] += 1
            hit_counts.append(counts)
        row = [number, fault, struck["victim"], struck["in_flight"],
               "yes" if struck["hit"] else "no", reclaimed, f"{settle:.0f}",
               *counts.values()]  # fmt: skip
        print("\t".join(str(cell) for cell in row), flush=True)
    print("rounds that hit (of run): " + ", ".join(f"{f} {hits[f]}/{tried[f]}" for f in faults))
    print("findings over the rounds that hit: " + _findings(hit_counts))


def _findings(rounds: list[dict[str, int]]) -> str:
    """The checks' findings summed over rounds; a check that could not run (-1, a failed
    preview) is said as such, never summed as 0."""
    found: dict[str, int] = {}
    failed: dict[str, int] = {}
    for counts in rounds:
        for key, value in counts.items():
            if key in ("refused", "late_saves"):
                continue
            found[key] = found.get(key, 0) + max(0, value)
            failed[key] = failed.get(key, 0) + (value < 0)
    return ", ".join(
        f"{key} {value}" + (f" (FAILED in {failed[key]} round(s))" if failed[key] else "")
        for key, value in found.items()
    )


if __name__ == "__main__":
    main()
