"""Benchmark: the pods on a pool's nodes through a reclaim, with and without spec.nodes.

One local world with nodes (kube-scheduler, KWOK, the node agent: docs/nodes.md), one emulator
(boot `--boot` s), one operator, two pools of `--size` instances whose user data joins them as
nodes: `aware` sets spec.nodes, `plain` does not (its nodes get their label from this script,
as a join's --node-labels would). On each, a Deployment of `--pods` pods (nodeSelector on the
pool's label) with a PodDisruptionBudget of minAvailable pods-1. Each round reclaims one
instance of each pool at the same moment (its node the one with the most of the pool's pods);
the clock runs from the reclaim until all the Deployment's pods are *serving* again: Running,
Ready, not being deleted, on a node whose instance the cloud still runs. Per round and pool:
those seconds and the pod-seconds not serving. With `--notice S` the emulator announces each
reclaim S seconds ahead and every instance runs `spotpool notice-agent`.

    .venv/bin/python bench/node_reclaims.py [--rounds 3] [--size 2] [--pods 4] [--boot 2]
        [--notice 0] [--limit 420]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.plots import percentile  # noqa: E402
from spotpool.api.nodes import instance_of  # noqa: E402
from spotpool.localworld.agents import NoticeAgents  # noqa: E402
from spotpool.localworld.nodes import NodeWorld  # noqa: E402
from spotpool.localworld.operator import OperatorWorld, local_world, pool_manifest  # noqa: E402
from spotpool.ports import free_port  # noqa: E402

REGION = "ap-singapore"
JOIN = "#!/bin/sh\n# spotpool:join-node\n"
POOLS = ("aware", "plain")
LABEL = "bench.spotpool.io/pool"


def workload(name: str, pods: int) -> list[dict[str, Any]]:
    selector = {"app": name}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": pods, "selector": {"matchLabels": selector},
                 "template": {"metadata": {"labels": selector},
                              "spec": {"nodeSelector": {LABEL: name},
                                       "terminationGracePeriodSeconds": 1,
                                       "containers": [{"name": "c", "image": "pause"}]}}},
    }  # fmt: skip
    budget = {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
        "spec": {"minAvailable": max(pods - 1, 0), "selector": {"matchLabels": selector}},
    }  # fmt: skip
    return [deployment, budget]


def items(world: OperatorWorld, *args: str) -> list[dict[str, Any]]:
    return list(json.loads(world.kube.ok(*args, "-o", "json"))["items"])


def alive(world: OperatorWorld) -> set[str]:
    return {
        i["InstanceId"]
        for i in world.emulator.all_instances()
        if not i.get("Gone") and i["InstanceState"] == "RUNNING"
    }


def serving(world: OperatorWorld, namespace: str) -> dict[str, dict[str, str]]:
    """pool -> {pod: node} of the pods serving now."""
    nodes = {n["metadata"]["name"]: instance_of(n) for n in items(world, "get", "nodes")}
    running = alive(world)
    found: dict[str, dict[str, str]] = {name: {} for name in POOLS}
    for pod in items(world, "-n", namespace, "get", "pods"):
        meta, status = pod["metadata"], pod.get("status") or {}
        node = (pod.get("spec") or {}).get("nodeName", "")
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        app = (meta.get("labels") or {}).get("app")
        if (
            app in found and status.get("phase") == "Running" and ready
            and not meta.get("deletionTimestamp") and nodes.get(node) in running
        ):  # fmt: skip
            found[app][meta["name"]] = node
    return found


def label_plain_nodes(world: OperatorWorld, namespace: str, stop: threading.Event) -> None:
    """The plain pool's join: its nodes carry the pool's label (a join's --node-labels)."""
    while not stop.wait(0.5):
        try:
            mine = {
                i["instanceId"] for i in world.status(namespace, "plain").get("instances") or []
            }
            mine |= {s["instanceId"] for s in world.status(namespace, "plain").get("surges") or []}
            for node in items(world, "get", "nodes"):
                labels = node["metadata"].get("labels") or {}
                if instance_of(node) in mine and labels.get(LABEL) != "plain":
                    world.kube.run("label", "node", node["metadata"]["name"], f"{LABEL}=plain")
        except Exception as error:  # the next pass tries again
            print(f"  labeller: {error}", file=sys.stderr)


def boot_agents(agents: NoticeAgents, uids: list[str], stop: threading.Event) -> None:
    while not stop.wait(1.0):
        for uid in uids:
            try:
                agents.boot(uid)
            except Exception as error:  # the next second tries again
                print(f"  agents: {error}", file=sys.stderr)


def one_round(
    world: OperatorWorld, namespace: str, pods: int, limit: float
) -> dict[str, tuple[float, float]]:
    """Reclaim, in each pool, the instance whose node serves most of its pods; per pool:
    (seconds until `pods` serve again, pod-seconds not serving), capped at `limit`."""
    now = serving(world, namespace)
    victims = {}
    for name in POOLS:
        busiest = max(set(now[name].values()), key=list(now[name].values()).count)
        node = json.loads(world.kube.ok("get", "node", busiest, "-o", "json"))
        victims[name] = str(instance_of(node))
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": list(victims.values())})
    start = last = time.monotonic()
    done: dict[str, float] = {}
    lost = dict.fromkeys(POOLS, 0.0)
    while len(done) < len(POOLS) and last - start < limit:
        time.sleep(0.5)
        now, at = serving(world, namespace), time.monotonic()
        for name in POOLS:
            if name in done:
                continue
            lost[name] += (pods - len(now[name])) * (at - last)
            gone = victims[name] not in alive(world)
            if gone and len(now[name]) >= pods:
                done[name] = at - start
        last = at
    return {name: (done.get(name, limit), lost[name]) for name in POOLS}


def settled(world: OperatorWorld, namespace: str, size: int, pods: int) -> None:
    def done() -> bool:
        for name in POOLS:
            status = world.status(namespace, name)
            if status.get("readyReplicas") != size or status.get("surges"):
                return False
        return all(len(v) == pods for v in serving(world, namespace).values())

    world.wait_until(done, "both pools and their pods settled", 600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=2)
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--boot", type=float, default=2.0)
    parser.add_argument("--notice", type=float, default=0.0, help="termination notice, s")
    parser.add_argument("--limit", type=float, default=420.0, help="a round's longest wait, s")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
    stop = threading.Event()
    with (
        tempfile.TemporaryDirectory(prefix="spotpool-bench-") as tmp,
        local_world(
            Path(tmp), boot_seconds=args.boot, notice_seconds=args.notice, refresh_seconds=60,
            env={"SPOTPOOL_NOTICE_PORT": str(free_port())} if args.notice else {},
        ) as world,
    ):  # fmt: skip
        nodes = NodeWorld(world.kube.kubeconfig.parent, world.emulator, Path(tmp))
        agents = NoticeAgents(world.emulator, REGION, Path(tmp) / "agents")
        nodes.start()
        try:
            world.start()
            namespace = world.namespace()
            notices = {} if args.notice else {"terminationNotices": {"enabled": False}}
            for name in POOLS:
                extra = {"nodes": {"labels": {LABEL: name}}} if name == "aware" else {}
                world.apply(namespace, pool_manifest(
                    name, replicas=args.size, userData=JOIN, **notices, **extra))  # fmt: skip
                for manifest in workload(name, args.pods):
                    world.kube.ok("-n", namespace, "apply", "-f", "-", stdin=json.dumps(manifest))
            uids = [
                str(world.wait_ready(namespace, n, args.size)["metadata"]["uid"]) for n in POOLS
            ]
            threading.Thread(
                target=label_plain_nodes, args=(world, namespace, stop), daemon=True
            ).start()
            if args.notice:  # cloud-init's part: an agent on every instance as it boots
                threading.Thread(target=boot_agents, args=(agents, uids, stop), daemon=True).start()
            found: dict[str, list[tuple[float, float]]] = {name: [] for name in POOLS}
            for n in range(args.rounds):
                settled(world, namespace, args.size, args.pods)
                result = one_round(world, namespace, args.pods, args.limit + args.notice)
                for name, value in result.items():
                    found[name].append(value)
                print(
                    f"  round {n + 1}: "
                    + ", ".join(
                        f"{k} {v[0]:5.1f} s ({v[1]:6.1f} pod-s)" for k, v in result.items()
                    ),
                    flush=True,
                )
        finally:
            stop.set()
            agents.stop()
            world.stop()
            nodes.stop()
    print(
        f"pool of {args.size}, {args.pods} pods (PDB minAvailable {args.pods - 1}), boot "
        f"{args.boot:g} s, notice {args.notice:g} s, {args.rounds} reclaims:"
    )
    for name in POOLS:
        seconds = [s for s, _ in found[name]]
        lost = [p for _, p in found[name]]
        print(
            f"  {name:6s} all pods serving again p50 {statistics.median(seconds):6.1f} s, "
            f"p95 {percentile(seconds, 0.95):6.1f} s; pod-seconds not serving p50 "
            f"{statistics.median(lost):6.1f}, p95 {percentile(lost, 0.95):6.1f}"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
