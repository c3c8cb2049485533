"""`spotpool demo`: the main job on the local world, start to finish, then a clean machine.

It starts the local cloud (the emulator), the local cluster (etcd, kube-apiserver,
kube-controller-manager) and a file state backend; installs the CRD; applies the article's sample
manifest changed only in its credentials; runs the operator; shows the pool converging; has the
cloud reclaim an instance and shows the operator replace it; prints `kubectl get spotpools -o wide`
and `pulumi stack output`; then deletes the pool (the operator destroys its instances) and stops
everything it started.
"""

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.table import Table
from tencentcloud.common import credential
from tencentcloud.common.profile.client_profile import ClientProfile
from tencentcloud.common.profile.http_profile import HttpProfile
from tencentcloud.cvm.v20170312 import cvm_client, models

from spotpool.api.crd import CRD_PATH
from spotpool.api.stackconfig import TAG_POOL_UID
from spotpool.children import tied_to_parent
from spotpool.cluster import local
from spotpool.engine.leftovers.recovery import GONE_STATES
from spotpool.engine.state import keyserver
from spotpool.localworld.emulator import start_emulator
from spotpool.localworld.kube import Kube
from spotpool.ports import free_port
from spotpool.toolchain.install import status
from spotpool.toolchain.manifest import TOOLS_BY_NAME
from spotpool.toolchain.paths import bin_dir, tool_dir

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
console = Console()
if not console.is_terminal:
    console = Console(width=120)  # logs and CI: wide enough for the tables


@contextmanager
def emulator(directory: Path, secret_id: str, secret_key: str) -> Iterator[str]:
    """The local world's emulator (boot 2 s) with this run's keys; stopped exactly afterwards."""
    process = start_emulator(
        directory / "cloud.db", directory / "emulator.log", boot_seconds=2,
        secret_id=secret_id, secret_key=secret_key,
    )  # fmt: skip
    try:
        yield process.endpoint
    finally:
        process.stop()


class Kubectl(Kube):
    """kubectl as the demo calls it: a failure is an error that says what kubectl said."""

    def __init__(self, kubeconfig: Path) -> None:
        super().__init__(kubeconfig, tool_dir(TOOLS_BY_NAME["kubectl"]) / "kubectl")

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        result = self.run(*args, stdin=stdin)
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout


STEPS = 7
POOL = "spotpool-sample"
NAMESPACE = "default"


def _step(number: int, text: str) -> None:
    console.rule(f"[bold]{number}/{STEPS}[/] {text}", align="left")


def _require_tools() -> None:
    missing = [
        name
        for name in (
            *("etcd", "kube-apiserver", "kube-controller-manager", "kubectl"),
            *("pulumi", "pulumi-resource-tencentcloud"),
        )
        if not status(TOOLS_BY_NAME[name]).ok
    ]
    if missing:
        raise typer.BadParameter(
            f"missing tools: {', '.join(missing)}: run `spotpool toolchain install` first"
        )


def _article_manifest(secret_id: str, secret_key: str) -> str:
    """The article's sample, changed only in its credentials."""
    manifest = yaml.safe_load((EXAMPLES / "article-sample.yaml").read_text())
    manifest["spec"]["secretId"], manifest["spec"]["secretKey"] = secret_id, secret_key
    return json.dumps(manifest)


@contextmanager
def operator(work: Path, kubeconfig: Path, endpoint: str, passphrase: str) -> Iterator[Path]:
    """Run `spotpool operator run` for the default namespace; stop exactly it afterwards."""
    log_path = work / "operator.log"
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "PULUMI_CONFIG_PASSPHRASE": passphrase,
        "SPOTPOOL_BACKEND_URL": f"file://{work / 'backend'}",
        "SPOTPOOL_WORK_DIR": str(work / "workspaces"),
        "SPOTPOOL_CLOUD_ENDPOINT": endpoint,
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            tied_to_parent(
                [sys.executable, "-m", "spotpool", "operator", "run", "--namespace", NAMESPACE,
                 "--refresh-interval", "5s", "--metrics-port", str(free_port()),
                 "--liveness-port", str(free_port()), "--log-format", "full"]
            ),
            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        yield log_path
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def _pool(kubectl: Kubectl) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(
        kubectl("-n", NAMESPACE, "get", "spotpool", POOL, "-o", "json")
    )
    return found


def _events(kubectl: Kubectl) -> list[tuple[str, str, str]]:
    """(name and count, reason, message) of the pool's Events, oldest first."""
    reply = json.loads(
        kubectl("-n", NAMESPACE, "get", "events", "-o", "json",
                "--field-selector", f"involvedObject.name={POOL},involvedObject.kind=Spotpool")
    )  # fmt: skip
    items = sorted(reply["items"], key=lambda e: e.get("lastTimestamp") or "")
    return [
        (f"{e['metadata']['name']}/{e.get('count', 1)}", e["reason"], e.get("message", ""))
        for e in items
    ]


def _instances_table(status: dict[str, Any], title: str) -> None:
    table = Table(
        "slot", "instance", "state", "zone", "type", "private ip", "public ip", title=title
    )
    for item in status.get("instances") or []:
        table.add_row(
            str(item.get("slot", "")), item["instanceId"], item.get("state", ""),
            item.get("zone", ""), item.get("instanceType", ""), item.get("privateIp", ""),
            item.get("publicIp", ""),
        )  # fmt: skip
    console.print(table)


def _watch(
    kubectl: Kubectl,
    done: Callable[[dict[str, Any]], bool],
    log: Path,
    seconds: float,
    seen: set[str],
) -> dict[str, Any]:
    """Print each change of the pool's phase and counts, and each Event not in `seen`, until
    `done`."""
    started, last = time.monotonic(), ""
    while True:
        pool = _pool(kubectl)
        status = pool.get("status") or {}
        line = (
            f"phase {status.get('phase') or '-'}, {status.get('readyReplicas', 0)} of "
            f"{status.get('replicas', '?')} ready, {status.get('size', 0)} exist"
        )
        if line != last:
            console.print(f"  {time.monotonic() - started:5.1f} s  {line}")
            last = line
        for key, reason, message in _events(kubectl):
            if key in seen:
                continue
            seen.add(key)
            console.print(
                f"  {time.monotonic() - started:5.1f} s  [cyan]event {reason}[/]: {message}"
            )
        if done(pool):
            return pool
        if time.monotonic() - started > seconds:
            raise RuntimeError(f"the pool did not get there in {seconds:.0f} s; see {log}")
        time.sleep(0.5)


def _ready(count: int) -> Callable[[dict[str, Any]], bool]:
    def check(pool: dict[str, Any]) -> bool:
        status = pool.get("status") or {}
        return bool(
            status.get("phase") == "Ready"
            and status.get("readyReplicas") == count
            and status.get("size") == count
            and status.get("observedGeneration") == pool["metadata"].get("generation")
        )

    return check


def _stack_output(work: Path, passphrase: str) -> str:
    env = {
        **os.environ,
        "PULUMI_BACKEND_URL": f"file://{work / 'backend'}",
        "PULUMI_CONFIG_PASSPHRASE": passphrase,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DIY_BACKEND_NO_LEGACY_WARNING": "true",
        **keyserver.service_for(passphrase).env(),  # when the operator made keyserver stacks
    }
    result = subprocess.run(
        [str(bin_dir() / "pulumi"), "stack", "output", "--json",
         "--stack", f"{NAMESPACE}.{POOL}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"pulumi stack output: {result.stderr.strip()}")
    return result.stdout


def _cvm(endpoint: str, secret_id: str, secret_key: str, region: str) -> cvm_client.CvmClient:
    host = endpoint.removeprefix("http://")
    profile = ClientProfile(httpProfile=HttpProfile(endpoint=host, protocol="http"))
    return cvm_client.CvmClient(credential.Credential(secret_id, secret_key), region, profile)


def _cloud_ids(client: cvm_client.CvmClient, uid: str) -> list[str]:
    request = models.DescribeInstancesRequest()
    request.from_json_string(
        json.dumps({"Filters": [{"Name": f"tag:{TAG_POOL_UID}", "Values": [uid]}]})
    )
    return [
        i.InstanceId
        for i in client.DescribeInstances(request).InstanceSet
        if i.InstanceState not in GONE_STATES
    ]


def demo(
    directory: Path | None = typer.Option(None, "--dir", help="Keep the demo's files here."),
) -> None:
    """Run the operator on the local world (emulator, local kube-apiserver, file backend)."""
    _require_tools()
    work = directory or Path(tempfile.mkdtemp(prefix="spotpool-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "backend").mkdir(exist_ok=True)
    # Throwaway keys for this run's emulator, passed by environment and in the manifest the
    # article's way; the stacks' passphrase likewise. Never on a command line.
    secret_id, secret_key = "AKID" + secrets.token_hex(16), secrets.token_urlsafe(24)
    passphrase = secrets.token_urlsafe(24)
    _step(1, "local cloud: the Tencent Cloud API emulator")
    with emulator(work, secret_id, secret_key) as endpoint:
        console.print(f"emulator on {endpoint} (log {work / 'emulator.log'})")
        client = _cvm(endpoint, secret_id, secret_key, "ap-singapore")
        _step(2, "local cluster: etcd + kube-apiserver + kube-controller-manager on 127.0.0.1")
        state = local.up(work / "cluster", tie_to_parent=True)
        try:
            console.print(f"kube-apiserver {state.server}; KUBECONFIG={state.kubeconfig}")
            kubectl = Kubectl(state.kubeconfig)
            _step(3, "the Spotpool API: the CRD and the article's manifest")
            kubectl("apply", "-f", str(ROOT / CRD_PATH))
            kubectl("wait", "--for=condition=Established", "crd/spotpools.devops.jokerbai.com")
            kubectl(
                "-n", NAMESPACE, "apply", "-f", "-", stdin=_article_manifest(secret_id, secret_key)
            )
            console.print(
                "applied examples/article-sample.yaml (only its keys swapped for the emulator's)"
            )
            with operator(work, state.kubeconfig, endpoint, passphrase) as log:
                _step(4, "the operator converges the pool (one Pulumi stack)")
                console.print(f"spotpool operator run --namespace {NAMESPACE} (log {log})")
                seen: set[str] = set()
                pool = _watch(kubectl, _ready(2), log, 300, seen)
                uid = pool["metadata"]["uid"]
                _instances_table(pool["status"], f"{NAMESPACE}/{POOL}: converged")
                _step(5, "the cloud reclaims a spot instance; the operator replaces it")
                victim = pool["status"]["instances"][0]["instanceId"]
                subprocess.run(
                    [sys.executable, "-m", "spotpool", "emulator", "reclaim",
                     "--endpoint", endpoint, "--instance-id", victim],
                    check=True, capture_output=True,
                )  # fmt: skip
                console.print(f"spotpool emulator reclaim --instance-id {victim}")
                pool = _watch(
                    kubectl,
                    lambda p: (
                        _ready(2)(p)
                        and victim not in {i["instanceId"] for i in p["status"]["instances"]}
                    ),
                    log,
                    300,
                    seen,
                )
                _instances_table(pool["status"], f"{NAMESPACE}/{POOL}: {victim} replaced")
                reclaims = pool["status"]["reclaims"]
                console.print(
                    f"status.reclaims: total {reclaims['total']}, last {reclaims['lastTime']}"
                )
                _step(6, "what a platform engineer sees: kubectl and the pulumi CLI")
                console.print("$ kubectl get spotpools -o wide")
                console.print(kubectl("-n", NAMESPACE, "get", "spotpools", "-o", "wide"))
                console.print(f"$ pulumi stack output --json --stack {NAMESPACE}.{POOL}")
                console.print(_stack_output(work, passphrase))
                _step(7, "clean up: delete the pool (the operator destroys its instances)")
                kubectl("-n", NAMESPACE, "delete", "spotpool", POOL, "--timeout=300s")
                left = _cloud_ids(client, uid)
                console.print(f"instances of the pool left in the cloud: {len(left)}")
                if left:
                    raise RuntimeError(f"instances left behind: {', '.join(left)}")
        finally:
            local.down(work / "cluster")
    console.print(f"[green]done[/]: operator, cluster and emulator stopped; files in {work}")
