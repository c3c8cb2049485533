"""Benchmark: the fleet probe over 1,000 idle pools, and a reclaim storm of 10 % of the fleet.

The local world (spotpool.localworld): a local kube-apiserver, the emulator (boot 0), a file
backend and `spotpool operator run`. Converging 1,000 pools from nothing costs ~4 CPU-s of
Pulumi per pool (bench/scale.py measures that); this benchmark is about what comes after, so
it converges one template pool for real and then seeds `--pools` more that look exactly as if
the operator had converged them: their own instances in the emulator (tagged as the program
tags them), their own stack checkpoint (the template's, renamed — a real Pulumi checkpoint the
engine later updates) and their status. Then:

1. the operator starts under a new hostname (a replaced pod) and takes every pool as applied
   (no `up`): the time until every pool is watched;
2. idle for `--idle` seconds: DescribeInstances calls per minute (the emulator's log: all
   calls the operator makes, its probe and every pool's timer), operator CPU % of one core
   (its whole process tree) and RSS;
3. a storm: `--storm` of all instances (10 %) reclaimed at once; the time until every pool
   is Ready again with none of the reclaimed instances left, and the calls it cost.

    .venv/bin/python bench/fleet_probe.py [--pools 1000] [--idle 180] [--storm 0.1]
"""

import argparse
import gzip
import json
import os
import random
import re
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
from kubernetes import client as kube_client
from kubernetes import config as kube_config
from tencentcloud.cvm.v20170312 import models

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pydantic import SecretStr  # noqa: E402

from spotpool.api.stackconfig import TAG_POOL, TAG_POOL_UID  # noqa: E402
from spotpool.engine.tencent import cloud  # noqa: E402
from spotpool.engine.tencent.credentials import Credentials  # noqa: E402
from spotpool.localworld.emulator import SECRET_ID, SECRET_KEY  # noqa: E402
from spotpool.localworld.operator import OperatorWorld, local_world, pool_manifest  # noqa: E402

TEMPLATE = "zqtemplatez"  # a name that stands nowhere else in a checkpoint
GROUP, VERSION, PLURAL = "devops.jokerbai.com", "v1", "spotpools"


def describe_calls(world: OperatorWorld, since: float = 0.0) -> Counter[str]:
    """DescribeInstances calls the emulator answered since `since` (its clock), by client: the
    operator's own SDK calls, or the tencentcloud provider's (inside Pulumi runs)."""
    reply = world.emulator.admin_ok("GET", "/_emulator/requests?action=DescribeInstances")
    return Counter(
        "operator" if "PYTHON" in call["Client"].upper() else "provider"
        for call in reply["Requests"]
        if call["Time"] >= since
    )


def tree_cpu_and_rss(pid: int) -> tuple[float, int]:
    """CPU seconds and resident bytes of a process and everything below it."""
    cpu, rss = 0.0, 0
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
            cpu += times.user + times.system
            rss += process.memory_info().rss
        except psutil.Error:
            continue
    return cpu, rss


class Seeder:
    """Pools made from a converged template: instances, checkpoint and status of their own."""

    def __init__(self, world: OperatorWorld, namespace: str, pools: int, size: int) -> None:
        self.world, self.namespace, self.pools, self.size = world, namespace, pools, size
        kube_config.load_kube_config(str(world.kube.kubeconfig))  # type: ignore[no-untyped-call]
        self.api = kube_client.CustomObjectsApi()
        self.stacks = world.directory / "backend" / ".pulumi" / "stacks" / "spotpool"

    def names(self) -> list[str]:
        return [f"p{n:04d}" for n in range(self.pools)]

    def manifest(self, name: str) -> dict[str, Any]:
        return pool_manifest(name, replicas=self.size, refreshInterval="60s")

    def template(self) -> dict[str, Any]:
        """Converge the template pool for real; its CR afterwards."""
        self.world.apply(self.namespace, self.manifest(TEMPLATE))
        return self.world.wait_ready(self.namespace, TEMPLATE, self.size, timeout=600)

    def seed(self, template: dict[str, Any]) -> None:
        ns, old_uid = self.namespace, template["metadata"]["uid"]
        old_ids = [i["instanceId"] for i in template["status"]["instances"]]
        checkpoint = gzip.decompress(self._checkpoint(TEMPLATE).read_bytes()).decode()
        status = json.dumps(template["status"])
        views = {i["InstanceId"]: i for i in self.world.emulator.all_instances()}
        templates = [views[instance_id] for instance_id in old_ids]
        keys = Credentials(secret_id=SecretStr(SECRET_ID), secret_key=SecretStr(SECRET_KEY))
        region = self.manifest(TEMPLATE)["spec"]["region"]
        cvm = cloud.cvm(keys, region, self.world.emulator.endpoint)
        started = time.monotonic()
        items = [self.manifest(name) for name in self.names()]
        self.world.kube.ok(
            "-n", ns, "apply", "--server-side", "-f", "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
        )  # fmt: skip
        uids = {item["metadata"]["name"]: item["metadata"]["uid"] for item in self._pools()}
        for name in self.names():
            uid = uids[name]
            ids = [self._run(cvm, template, name, uid) for template in templates]

            def renamed(text: str, uid: str = uid, ids: list[str] = ids, name: str = name) -> str:
                text = text.replace(TEMPLATE, name).replace(old_uid, uid)
                for old, new in zip(old_ids, ids, strict=True):
                    text = text.replace(old, new)
                return text

            self._checkpoint(name).write_bytes(gzip.compress(renamed(checkpoint).encode()))
            self.api.patch_namespaced_custom_object_status(
                GROUP, VERSION, ns, PLURAL, name, {"status": json.loads(renamed(status))}
            )
        print(
            f"  seeded {self.pools} pools of {self.size} in {time.monotonic() - started:.0f} s "
            "(instances, checkpoints, status)",
            flush=True,
        )

    def _pools(self) -> list[dict[str, Any]]:
        reply: Any = self.api.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)
        return list(reply["items"])

    def _checkpoint(self, name: str) -> Path:
        return self.stacks / f"{self.namespace}.{name}.json.gz"

    def _run(self, cvm: Any, template: dict[str, Any], name: str, uid: str) -> str:
        """An instance made exactly as the program made the template's, but for `name`: the
        provider then finds nothing to change in it."""
        tags = {t["Key"]: t["Value"] for t in template.get("Tags") or []}
        tags.update({TAG_POOL_UID: uid, TAG_POOL: f"{self.namespace}/{name}"})
        body: dict[str, Any] = {
            "InstanceChargeType": template["InstanceChargeType"],
            "Placement": {"Zone": template["Placement"]["Zone"]},
            "ImageId": template["ImageId"],
            "InstanceType": template["InstanceType"],
            "InstanceName": template["InstanceName"].replace(TEMPLATE, name),
            "HostName": template["HostName"].replace(TEMPLATE, name),
            "SystemDisk": {
                "DiskType": template["SystemDisk"]["DiskType"],
                "DiskSize": template["SystemDisk"]["DiskSize"],
            },
            "InternetAccessible": template["InternetAccessible"],
            "VirtualPrivateCloud": {
                "VpcId": template["VirtualPrivateCloud"]["VpcId"],
                "SubnetId": template["VirtualPrivateCloud"]["SubnetId"],
            },
            "SecurityGroupIds": template["SecurityGroupIds"],
            "TagSpecification": [
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ],
        }
        if template["InstanceChargeType"] == "SPOTPAID":
            body["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time"},
            }
        request = models.RunInstancesRequest()
        request.from_json_string(json.dumps(body))
        return str(cvm.RunInstances(request).InstanceIdSet[0])

    def all_ready(self, without: set[str]) -> bool:
        for pool in self._pools():
            status = pool.get("status") or {}
            ids = {i["instanceId"] for i in status.get("instances") or []}
            if status.get("readyReplicas") != self.size or ids & without:
                return False
        return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=1000)
    parser.add_argument("--size", type=int, default=2, help="instances a pool")
    parser.add_argument("--idle", type=float, default=180.0, help="seconds idle to measure")
    parser.add_argument("--storm", type=float, default=0.1, help="share of instances reclaimed")
    parser.add_argument("--storm-timeout", type=float, default=3600.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="spotpool-bench-") as tmp,
        local_world(
            Path(tmp),
            boot_seconds=0,
            refresh_seconds=60,
            hostname="spotpool-operator-first",
            env={"SPOTPOOL_LEASE_DURATION": "30s"},  # the install's default, not the tests' 6 s
        ) as world,
    ):
        world.start()
        namespace = world.namespace()
        seeder = Seeder(world, namespace, args.pools, args.size)
        template = seeder.template()
        world.stop()
        seeder.seed(template)

        # 1. a replaced pod takes every pool as applied
        world.hostname = f"spotpool-operator-{uuid.uuid4().hex[:5]}"
        before = world.log.read_text(errors="replace")
        t0 = time.monotonic()
        world.start()
        marker = "the stack already applied this spec: no up on resume"
        pools = args.pools + 1

        def watched() -> int:
            return world.log.read_text(errors="replace")[len(before) :].count(marker)

        world.wait_until(lambda: watched() >= pools, "every pool watched", timeout=1800)
        print(f"  {pools} pools watched {time.monotonic() - t0:.1f} s after the start (no up)")

        # 2. idle
        time.sleep(15)  # the first sweeps after the start
        assert world.process is not None
        since, (cpu0, _) = time.time(), tree_cpu_and_rss(world.process.pid)
        t0 = time.monotonic()
        time.sleep(args.idle)
        elapsed = time.monotonic() - t0
        calls, (cpu1, rss) = describe_calls(world, since), tree_cpu_and_rss(world.process.pid)
        per_minute = sum(calls.values()) * 60 / elapsed
        print(
            f"  idle {elapsed:.0f} s over {pools} pools x {args.size}: "
            f"{per_minute:.1f} DescribeInstances a minute ({calls['operator']} by the operator, "
            f"{calls['provider']} by Pulumi runs in {elapsed:.0f} s), "
            f"operator CPU {100 * (cpu1 - cpu0) / elapsed:.1f} % of one core, "
            f"RSS {rss / 2**20:.0f} MiB",
            flush=True,
        )

        # 3. a storm
        everything = [
            i["InstanceId"]
            for i in world.emulator.all_instances()
            if not i.get("Gone") and i["InstanceState"] == "RUNNING"
        ]
        victims = random.Random(args.seed).sample(everything, k=int(len(everything) * args.storm))
        calls0 = len(world.emulator.actions())
        t0 = time.monotonic()
        world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": victims})
        world.wait_until(
            lambda: seeder.all_ready(set(victims)),
            "every pool replaced",
            timeout=args.storm_timeout,
        )
        elapsed = time.monotonic() - t0
        actions = world.emulator.actions()[calls0:]
        ups = re.findall(
            r'spotpool_operations_total\{kind="up",result="\w+"\} (\d+)', world.metrics()
        )
        print(
            f"  storm: {len(victims)} of {len(everything)} instances reclaimed at once, all "
            f"replaced in {elapsed:.0f} s; API calls meanwhile {len(actions)} "
            f"({sum(a.endswith('RunInstances') for a in actions)} RunInstances, "
            f"{sum(a.endswith('DescribeInstances') for a in actions)} DescribeInstances); "
            f"engine ups {sum(map(int, ups))}"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
