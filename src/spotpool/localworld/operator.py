"""The operator's whole world: a local kube-apiserver, an emulator process as the cloud, a file
(or S3) backend, and `spotpool operator run` as a subprocess that is started, stopped and killed
(its whole process tree) by its own pid — under a hostname of its own when asked, as a pod."""

import contextlib
import json
import os
import signal
import subprocess
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

from spotpool.api.access import CONSENT_KEY
from spotpool.api.spec import GROUP, PLURAL, VERSION
from spotpool.children import tied_to_parent
from spotpool.localworld.emulator import (
    SECRET_ID,
    SECRET_KEY,
    SPOTPOOL,
    EmulatorProcess,
    wait_until,
)
from spotpool.localworld.kube import Kube
from spotpool.localworld.nodes import NodeWorld
from spotpool.ports import free_port

ROOT = Path(__file__).parents[3]  # the repository
ARTICLE_SAMPLE = ROOT / "examples" / "article-sample.yaml"
PASSPHRASE = "operator-e2e-passphrase"
GONE_STATES = {"TERMINATING", "SHUTDOWN", "LAUNCH_FAILED"}


def article_manifest() -> dict[str, Any]:
    """The article's sample, changed only in its credentials (the emulator's keys)."""
    manifest: dict[str, Any] = yaml.safe_load(ARTICLE_SAMPLE.read_text())
    manifest["spec"]["secretId"] = SECRET_ID
    manifest["spec"]["secretKey"] = SECRET_KEY
    return manifest


def secret_manifest(name: str = "tencentcloud", consent: bool = True) -> dict[str, Any]:
    """The Secret of the emulator's keys; with `consent`, opted in to being used by Spotpools
    (the label spotpool.devops.jokerbai.com/usable: "true", docs/access.md)."""
    labels = {CONSENT_KEY: "true"} if consent else {}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": labels},
        "stringData": {"secretId": SECRET_ID, "secretKey": SECRET_KEY},
    }


def pool_manifest(name: str, **spec: Any) -> dict[str, Any]:
    """A pool with its credentials in the `tencentcloud` Secret."""
    return {
        "apiVersion": "devops.jokerbai.com/v1",
        "kind": "Spotpool",
        "metadata": {"name": name},
        "spec": {
            "credentialsSecretRef": {"name": "tencentcloud"},
            "region": "ap-singapore",
            "availabilityZone": "ap-singapore-2",
            "instanceType": "GN7.2XLARGE32",
            "minimum": 1,
            "maximum": 5,
            "imageId": "img-eb30mz89",
            **spec,
        },
    }


POOLS_PATH = f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{PLURAL}"


@dataclass
class OperatorWorld:
    kube: Kube
    emulator: EmulatorProcess
    directory: Path
    refresh_seconds: int = 30
    process: subprocess.Popen[bytes] | None = None
    metrics_port: int = 0
    liveness_port: int = 0
    starts: int = 0
    namespaces: list[str] = field(default_factory=list)
    hostname: str | None = None  # run in a UTS namespace of its own under this name, as a pod
    lease_namespace: str | None = "default"  # hold a Lease there, as in a cluster
    backend_url: str | None = None  # default: file:// under `directory`
    backend_env: dict[str, str] = field(default_factory=dict)  # e.g. the S3 keys
    namespace_prefix: str = "op-"  # the namespaces it makes, and the only ones it serves
    env: dict[str, str] = field(default_factory=dict)  # more SPOTPOOL_* settings, e.g. shards
    nodes: NodeWorld | None = None  # the cluster's nodes, in a world with them (localworld/nodes)

    # --- the operator process ---------------------------------------------------------------
    @property
    def log(self) -> Path:
        return self.directory / "operator.log"

    def start(self, wait: bool = True) -> None:
        """Start the operator and wait for its liveness endpoint (unless not `wait`: it comes
        up only once the operator reaches the API server); a probe port another process took
        between our pick and its bind gets one more try on fresh ports."""
        try:
            self._start(wait)
        except AssertionError as error:
            if "address already in use" not in str(error):
                raise
            self._start(wait)

    def _start(self, wait: bool) -> None:
        self.metrics_port, self.liveness_port = free_port(), free_port()
        self.starts += 1
        # The passphrase from a file, as the chart mounts it: neither the operator's environment
        # nor its Pulumi runs' hold it.
        passphrase = self.directory / "passphrase"
        passphrase.write_text(PASSPHRASE)
        passphrase.chmod(0o600)
        env = {
            **{k: v for k, v in os.environ.items() if k != "PULUMI_CONFIG_PASSPHRASE"},
            "KUBECONFIG": str(self.kube.kubeconfig),
            "SPOTPOOL_PASSPHRASE_FILE": str(passphrase),
            "SPOTPOOL_WORK_DIR": str(self.directory / "workspaces"),
            "SPOTPOOL_BACKEND_URL": self.backend_url or f"file://{self.directory / 'backend'}",
            **self.backend_env,
            "SPOTPOOL_CLOUD_ENDPOINT": self.emulator.endpoint,
            "SPOTPOOL_REFRESH_INTERVAL": str(self.refresh_seconds),
            "SPOTPOOL_MAX_CONCURRENT": "3",
        }
        if self.lease_namespace:
            env["SPOTPOOL_LEASE_NAMESPACE"] = self.lease_namespace
            env["SPOTPOOL_LEASE_DURATION"] = "6s"  # a killed operator's successor waits this
            # Every shard Lease held is renewed each sixth of the duration: the default 16 at
            # 6 s are 16 Lease writes a second, a tenth of the API server's CPU and a quarter
            # of the operator's for each operator a test runs. Two keep the sharded path; the
            # replica tests choose their own count (env).
            env["SPOTPOOL_SHARDS"] = "2"
        env.update(self.env)
        command = [
            str(SPOTPOOL), "operator", "run", "--namespace", f"{self.namespace_prefix}*",
            "--metrics-port", str(self.metrics_port),
            "--liveness-port", str(self.liveness_port),
            "--log-format", "full", "--verbose",  # debug logs: secrets must stay out of them too
        ]  # fmt: skip
        if self.hostname:  # a replaced pod: same code, another hostname
            command = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"',
                       self.hostname, *command]  # fmt: skip
        with self.log.open("ab") as log:
            log.write(f"\n=== operator start {self.starts} ===\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                tied_to_parent(command),  # a test run that dies takes its operator with it
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True,  # its own group: a kill takes pulumi and plugins too
            )  # fmt: skip
        if wait:
            self.wait_until(self.alive, "the operator's liveness endpoint", timeout=60)

    def alive(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"the operator exited:\n{self.log_tail()}")
        try:
            url = f"http://127.0.0.1:{self.liveness_port}/healthz"
            with urllib.request.urlopen(url, timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            return str(reply.read().decode())

    def stop(self) -> None:
        """SIGTERM to the operator alone (as a pod's PID 1 gets it), then SIGKILL to its group
        after a grace period."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL to the operator's whole process tree at once — the CLI runs and the provider
        plugins in their own process groups included — as when a pod's containers die."""
        if self.process is None:
            return
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.process.pid)
            for process in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    process.send_signal(signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def log_tail(self, lines: int = 80) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    # --- the cluster ------------------------------------------------------------------------
    def namespace(self) -> str:
        """A fresh namespace with the `tencentcloud` Secret holding the emulator's keys."""
        name = f"{self.namespace_prefix}{uuid.uuid4().hex[:8]}"
        self.kube.ok("create", "namespace", name)
        self.kube.ok("-n", name, "apply", "-f", "-", stdin=json.dumps(secret_manifest()))
        self.namespaces.append(name)
        return name

    def apply(self, namespace: str, manifest: dict[str, Any]) -> None:
        self.kube.ok("-n", namespace, "apply", "-f", "-", stdin=json.dumps(manifest))

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.kube.read(f"{POOLS_PATH.format(namespace=namespace)}/{name}")

    def release_namespaces(self) -> None:
        """Delete the namespaces made, with the pools left in them (the operator stopped)."""
        self.kube.delete_namespaces(self.namespaces, POOLS_PATH)

    def pools(self, namespace: str) -> list[dict[str, Any]]:
        """Every Spotpool of the namespace, as `kubectl get spotpools -o json` lists them."""
        listed = self.kube.read(POOLS_PATH.format(namespace=namespace))
        return list((listed or {}).get("items") or [])

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        pool = self.get(namespace, name)
        return dict((pool or {}).get("status") or {})

    def condition(self, namespace: str, name: str, type_: str) -> dict[str, Any]:
        for item in self.status(namespace, name).get("conditions") or []:
            if item["type"] == type_:
                return dict(item)
        return {}

    def events(self, namespace: str, name: str) -> list[tuple[str, str, str]]:
        selector = f"involvedObject.name={name},involvedObject.kind=Spotpool"
        reply = self.kube.read(f"/api/v1/namespaces/{namespace}/events", fieldSelector=selector)
        reply = reply or {"items": []}
        return [(e["type"], e["reason"], e.get("message", "")) for e in reply["items"]]

    def reasons(self, namespace: str, name: str) -> list[str]:
        return [reason for _, reason, _ in self.events(namespace, name)]

    # --- the cloud --------------------------------------------------------------------------
    def cloud(self, uid: str) -> dict[str, str]:
        """id -> state of every live instance carrying this pool's uid tag."""
        return {
            item["InstanceId"]: item["InstanceState"]
            for item in self.emulator.all_instances()
            if not item.get("Gone")
            and item["InstanceState"] not in GONE_STATES
            and {"Key": "spotpool-pool-uid", "Value": uid} in (item.get("Tags") or [])
        }

    def made(self, uids: set[str]) -> list[dict[str, Any]]:
        """Every instance the emulator ever made for these pools, gone ones too."""
        return [
            item
            for item in self.emulator.all_instances()
            if any(t.get("Key") == "spotpool-pool-uid" and t.get("Value") in uids
                   for t in item.get("Tags") or [])
        ]  # fmt: skip

    # --- waiting ----------------------------------------------------------------------------
    def wait_until(self, probe: Callable[[], Any], what: str, timeout: float = 180.0) -> Any:
        """The harness's wait, with the operator's log in the failure."""
        try:
            return wait_until(probe, what, timeout=timeout, every=0.5)
        except AssertionError as error:
            raise AssertionError(f"{error}\n--- operator log ---\n{self.log_tail()}") from None

    def wait_ready(
        self, namespace: str, name: str, count: int, timeout: float = 240
    ) -> dict[str, Any]:
        """Until status says Ready with `count` RUNNING instances that the cloud also has."""

        last: dict[str, Any] = {}

        def ready() -> dict[str, Any] | None:
            pool = self.get(namespace, name) or {}
            status = last["status"] = pool.get("status") or {}
            ready: dict[str, Any] = next(
                (c for c in status.get("conditions") or [] if c["type"] == "Ready"), {}
            )
            if (
                status.get("phase") == "Ready"
                and ready.get("status") == "True"
                and status.get("readyReplicas") == count
                and status.get("size") == count
                and status.get("observedGeneration") == pool["metadata"]["generation"]
            ):
                return pool
            return None

        try:
            pool: dict[str, Any] = self.wait_until(
                ready, f"{namespace}/{name} Ready with {count}", timeout
            )
        except AssertionError as error:  # what it showed last, before the log
            shown = {k: last.get("status", {}).get(k) for k in ("phase", "readyReplicas", "size",
                                                                "observedGeneration")}  # fmt: skip
            conditions = [(c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                          for c in last.get("status", {}).get("conditions") or []]  # fmt: skip
            raise AssertionError(f"last status {shown}, conditions {conditions}\n{error}") from None
        return pool


@contextmanager
def local_world(
    work: Path,
    boot_seconds: float = 1.0,
    notice_seconds: float = 0.0,
    emulator_args: list[str] | None = None,
    **options: Any,
) -> Iterator[OperatorWorld]:
    """The whole local world in `work`: `spotpool cluster up` with the CRD, an emulator, a file
    backend and an OperatorWorld over them (`options`: its fields; not started yet). Every
    process is stopped on the way out."""
    from spotpool.cluster.local import down, up
    from spotpool.localworld.emulator import start_emulator
    from spotpool.toolchain.install import status as tool_status
    from spotpool.toolchain.manifest import TOOLS_BY_NAME

    state = up(work / "cluster", tie_to_parent=True)
    emulator = None
    world = None
    try:
        emulator = start_emulator(
            work / "cloud.db", work / "emulator.log", boot_seconds=boot_seconds,
            reclaim_notice_seconds=notice_seconds, extra_args=emulator_args,
        )  # fmt: skip
        kube = Kube(state.kubeconfig, tool_status(TOOLS_BY_NAME["kubectl"]).path)
        kube.ok("apply", "-f", str(ROOT / "crds"))  # Spotpool, SpotpoolAccessPolicy
        kube.ok("wait", "--for=condition=Established", "crd/spotpools.devops.jokerbai.com",
                "crd/spotpoolaccesspolicies.devops.jokerbai.com")  # fmt: skip
        (work / "backend").mkdir(exist_ok=True)
        world = OperatorWorld(kube, emulator, work, **options)
        yield world
    finally:
        if world is not None:
            world.stop()
        if emulator is not None:
            emulator.stop()
        down(work / "cluster")
