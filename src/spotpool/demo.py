"""`spotpool demo`: the main job on the embedded local world, as far as it can run here.

It starts the local cloud (the emulator) and the local cluster (etcd + kube-apiserver),
installs the CRD, applies the article's manifest unchanged and a pool whose credentials come
from a Secret, renders each pool's stack configuration from the live resource, then shows
the cloud side of a pool's life with the official Tencent Cloud SDK: spot instances boot,
one is reclaimed, the pool is short. The Pulumi engine that would drive the stack cannot be
built on this workplace (see README), so the operator is not started.
"""

import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from tencentcloud.common import credential
from tencentcloud.common.profile.client_profile import ClientProfile
from tencentcloud.common.profile.http_profile import HttpProfile
from tencentcloud.cvm.v20170312 import cvm_client, models

from spotpool.api.crd import CRD_PATH
from spotpool.api.spec import SpotpoolSpec
from spotpool.api.stackconfig import TAG_POOL_UID, PoolIdentity, StackConfig
from spotpool.cluster import local
from spotpool.toolchain.manifest import TOOLS_BY_NAME
from spotpool.toolchain.paths import tool_dir

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
console = Console()
if not console.is_terminal:
    console = Console(width=120)  # logs and CI: wide enough for the tables


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def emulator(directory: Path, secret_id: str, secret_key: str) -> Iterator[str]:
    """Run `spotpool emulator serve` on a free loopback port; stop exactly it afterwards."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = (directory / "emulator.log").open("wb")
    env = {**os.environ, "TENCENTCLOUD_SECRET_ID": secret_id, "TENCENTCLOUD_SECRET_KEY": secret_key}
    process = subprocess.Popen(
        [sys.executable, "-m", "spotpool", "emulator", "serve", "--port", str(port),
         "--state", str(directory / "cloud.db"), "--boot-seconds", "2"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(endpoint + "/_emulator/health", timeout=1):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the emulator did not start; see {log.name}") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.binary = tool_dir(TOOLS_BY_NAME["kubectl"]) / "kubectl"
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            [str(self.binary), *args], input=stdin, env=self.env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout


def _step(number: int, text: str) -> None:
    console.rule(f"[bold]{number}/6[/] {text}", align="left")


def _stack_table(kubectl: Kubectl) -> list[StackConfig]:
    pools = json.loads(kubectl("get", "spotpools", "-A", "-o", "json"))["items"]
    table = Table("stack", "count", "zones", "types", "charge", "credentials from")
    configs = []
    for item in pools:
        meta = item["metadata"]
        spec = SpotpoolSpec.model_validate(item["spec"])
        identity = PoolIdentity(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])
        config = StackConfig.from_spec(identity, spec)
        ref = spec.credentials_secret_ref
        table.add_row(
            identity.stack_name,
            str(config.count),
            ",".join(config.zones),
            ",".join(config.instance_types),
            config.charge_type.value,
            f"Secret {ref.name}" if ref else "[yellow]inline in the resource: move to a Secret[/]",
        )
        configs.append(config)
    console.print(table)
    return configs


def _cvm(endpoint: str, secret_id: str, secret_key: str, region: str) -> cvm_client.CvmClient:
    host = endpoint.removeprefix("http://")
    profile = ClientProfile(httpProfile=HttpProfile(endpoint=host, protocol="http"))
    return cvm_client.CvmClient(credential.Credential(secret_id, secret_key), region, profile)


def _run_pool(client: cvm_client.CvmClient, config: StackConfig) -> list[str]:
    """Ask the cloud for the pool's slots the way the stack program declares them."""
    ids = []
    for slot in range(config.count):
        request = models.RunInstancesRequest()
        body: dict[str, Any] = {
            "Placement": {"Zone": config.zone_of(slot)},
            "ImageId": config.image_id,
            "InstanceType": config.instance_types[0],
            "InstanceChargeType": config.charge_type.value,
            "InstanceMarketOptions": {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time"},
            },
            "VirtualPrivateCloud": {"VpcId": config.vpc_id, "SubnetId": config.subnet_id},
            "SecurityGroupIds": config.security_group_ids,
            "InternetAccessible": {
                "InternetChargeType": config.internet_accessible.charge_type.value,
                "InternetMaxBandwidthOut": config.internet_accessible.max_bandwidth_out,
                "PublicIpAssigned": config.internet_accessible.public_ip_assigned,
            },
            "InstanceName": f"{config.pool.name}-slot-{slot}",
            "ClientToken": f"{config.pool.uid}-{slot}",
            "TagSpecification": [
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in config.instance_tags(slot).items()],
                }
            ],
        }
        request.from_json_string(json.dumps(body))
        ids += client.RunInstances(request).InstanceIdSet
    return ids


def _pool_instances(client: cvm_client.CvmClient, config: StackConfig) -> list[Any]:
    request = models.DescribeInstancesRequest()
    request.from_json_string(
        json.dumps({"Filters": [{"Name": f"tag:{TAG_POOL_UID}", "Values": [config.pool.uid]}]})
    )
    return list(client.DescribeInstances(request).InstanceSet)


def _show(client: cvm_client.CvmClient, config: StackConfig, title: str) -> list[Any]:
    instances = _pool_instances(client, config)
    table = Table("instance", "state", "zone", "type", "private ip", "public ip", title=title)
    for i in instances:
        table.add_row(
            i.InstanceId,
            i.InstanceState,
            i.Placement.Zone,
            i.InstanceType,
            ",".join(i.PrivateIpAddresses or []),
            ",".join(i.PublicIpAddresses or []),
        )
    console.print(table)
    return instances


def _wait_for(client: cvm_client.CvmClient, config: StackConfig, done: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not done(_pool_instances(client, config)):
        if time.monotonic() > deadline:
            raise RuntimeError("the emulator did not reach the expected state in time")
        time.sleep(0.5)


def _cloud_tour(endpoint: str, secret_id: str, secret_key: str, config: StackConfig) -> None:
    client = _cvm(endpoint, secret_id, secret_key, config.region)
    started = time.monotonic()
    ids = _run_pool(client, config)
    _show(client, config, f"{config.pool.stack_name}: just created")
    _wait_for(client, config, lambda xs: all(x.InstanceState == "RUNNING" for x in xs), 30)
    _show(client, config, f"RUNNING after {time.monotonic() - started:.1f} s")
    victim = ids[0]
    subprocess.run(
        [sys.executable, "-m", "spotpool", "emulator", "reclaim", "--endpoint", endpoint,
         "--instance-id", victim],
        check=True, capture_output=True,
    )  # fmt: skip
    console.print(f"the cloud reclaims [bold]{victim}[/] (spotpool emulator reclaim)")
    _wait_for(client, config, lambda xs: victim not in {x.InstanceId for x in xs}, 30)
    left = _show(client, config, "after the reclaim")
    console.print(
        f"pool {config.pool.stack_name}: {len(left)} of {config.count} — the operator's timed "
        "refresh finds exactly this, and `up` brings the pool back to size."
    )


def demo(
    directory: Path | None = typer.Option(None, "--dir", help="Keep the demo's files here."),
) -> None:
    """Run the main job on the local world (emulator + local kube-apiserver), then clean up."""
    work = directory or Path(tempfile.mkdtemp(prefix="spotpool-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    # Throwaway keys for this run's emulator, passed by environment and by Secret: never argv.
    secret_id, secret_key = "AKID" + secrets.token_hex(16), secrets.token_urlsafe(24)
    _step(1, "local cloud: the Tencent Cloud API emulator")
    with emulator(work, secret_id, secret_key) as endpoint:
        console.print(f"emulator on {endpoint} (log {work / 'emulator.log'})")
        _step(2, "local cluster: etcd + kube-apiserver on 127.0.0.1")
        state = local.up(work / "cluster", tie_to_parent=True)
        try:
            console.print(f"kube-apiserver {state.server}; KUBECONFIG={state.kubeconfig}")
            kubectl = Kubectl(state.kubeconfig)
            _step(3, "the Spotpool API: CRD, the article's manifest, a pool with a Secret")
            kubectl("apply", "-f", str(ROOT / CRD_PATH))
            kubectl("wait", "--for=condition=Established", "crd/spotpools.devops.jokerbai.com")
            kubectl(
                "create", "secret", "generic", "tencentcloud",
                f"--from-literal=secretId={secret_id}", f"--from-literal=secretKey={secret_key}",
            )  # fmt: skip
            kubectl("apply", "-f", str(EXAMPLES / "article-sample.yaml"))
            kubectl("apply", "-f", str(EXAMPLES / "gpu-pool.yaml"))
            console.print(kubectl("get", "spotpools"))
            _step(4, "each pool's Pulumi stack configuration, rendered from the live resource")
            configs = _stack_table(kubectl)
            _step(5, "the cloud side of a pool's life (official Tencent Cloud SDK → emulator)")
            gpu_pool = next(c for c in configs if c.pool.name == "gpu-pool")
            _cloud_tour(endpoint, secret_id, secret_key, gpu_pool)
            _step(6, "the operator")
            console.print(
                "Not started: it drives each stack with the Pulumi engine, and the Pulumi CLI "
                "and plugins cannot be built on this workplace (README: 'What cannot be built "
                "here'). Everything above is what it stands on."
            )
        finally:
            local.down(work / "cluster")
    console.print(f"[green]done[/]: emulator and cluster stopped; files in {work}")
