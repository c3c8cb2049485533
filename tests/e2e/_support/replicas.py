"""Operator replicas on one cluster, one emulator and one state backend (a shared volume or a
local S3 server), each under a hostname of its own as pods are, holding shards in one Lease
namespace: the multi-replica world of the shard, fencing and hand-over tests, written once."""

import json
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from spotpool.cluster import s3
from spotpool.localworld.emulator import EmulatorProcess, start_emulator
from spotpool.localworld.kube import Kube
from spotpool.localworld.operator import POOLS_PATH
from spotpool.localworld.slow_proxy import StallProxy, target_of
from tests._support.s3 import local_s3
from tests._support.tools import require_tool
from tests.operator.world import OperatorWorld, pool_manifest

DELETE_TIMEOUT = 120.0  # seconds the pools' deletion may take at the end of a test


@dataclass
class Replicas:
    """The replicas started so far (by name), the ones killed, the proxies some of them reach
    the API server through. Every replica gets `env` (SPOTPOOL_SHARDS and the like)."""

    kube: Kube
    emulator: EmulatorProcess
    directory: Path
    lease_namespace: str
    backend_url: str
    backend_env: dict[str, str] = field(default_factory=dict)
    server: s3.LocalS3 | None = None  # the S3 server, when the backend is one
    namespace_prefix: str = "rep-"
    refresh_seconds: int = 300
    env: dict[str, str] = field(default_factory=dict)
    delete_pools: bool = True  # at the end, while a replica serves them (else left terminating)
    replicas: dict[str, OperatorWorld] = field(default_factory=dict)
    killed: dict[str, float] = field(default_factory=dict)  # name -> time.time() of the kill
    proxies: list[StallProxy] = field(default_factory=list)

    def start(
        self, name: str, env: dict[str, str] | None = None, wait: bool = True
    ) -> OperatorWorld:
        """Start replica `name` (its own directory, log and hostname) with `env` on top; with
        not `wait`, return before it answers its liveness probe."""
        directory = self.directory / name
        directory.mkdir()
        world = OperatorWorld(
            self.kube, self.emulator, directory, refresh_seconds=self.refresh_seconds,
            hostname=f"spotpool-operator-{name}-{uuid.uuid4().hex[:4]}",
            lease_namespace=self.lease_namespace, backend_url=self.backend_url,
            backend_env=self.backend_env, namespace_prefix=self.namespace_prefix,
            env={**self.env, **(env or {})},
        )  # fmt: skip
        world.start(wait)
        self.replicas[name] = world
        return world

    def proxy(self, name: str, delay: float = 0.0) -> tuple[StallProxy, Path]:
        """A TCP proxy to the API server (stalled at will, or adding `delay` seconds to every
        chunk) and a kubeconfig through it, for replica `name`: env KUBECONFIG=<the path>."""
        proxy = StallProxy(*target_of(self.kube.kubeconfig))
        proxy.delay = delay
        self.proxies.append(proxy)
        path = self.directory / f"kubeconfig-{name}-via-proxy"
        return proxy, proxy.kubeconfig(self.kube.kubeconfig, path)

    def kill(self, name: str) -> None:
        """SIGKILL replica `name` with its whole process tree."""
        self.killed[name] = time.time()
        self.replicas[name].kill()

    def live(self) -> dict[str, OperatorWorld]:
        return {n: w for n, w in self.replicas.items() if n not in self.killed}

    def held(self) -> dict[str, set[int]]:
        """Shards each live replica holds, from its metrics."""
        return {name: shards_held(world.metrics()) for name, world in self.live().items()}

    @property
    def namespaces(self) -> set[str]:
        return {n for world in self.replicas.values() for n in world.namespaces}

    def close(self) -> None:
        """Delete the pools while a replica still serves them (their finalizers come off), stop
        every replica and proxy, delete the namespaces made."""
        for proxy in self.proxies:
            proxy.stalled.clear()
        namespaces = self.namespaces
        if self.delete_pools and self.live():
            delete_pools_while_served(self.kube, namespaces)
        for world in self.replicas.values():
            world.stop()
        self.kube.delete_namespaces([*namespaces, self.lease_namespace], POOLS_PATH)
        for proxy in self.proxies:
            proxy.close()


def shards_held(metrics: str) -> set[int]:
    """The shards a replica's metrics say it holds."""
    found = re.findall(r'^spotpool_shard_held\{shard="(\d+)"\} 1\.0$', metrics, re.MULTILINE)
    return {int(shard) for shard in found}


def apply_pools(world: OperatorWorld, namespace: str, names: list[str], replicas: int = 1) -> None:
    """One `kubectl apply` of a pool per name (each of `replicas` instances)."""
    items = [
        {**pool_manifest(n, replicas=replicas), "metadata": {"name": n, "namespace": namespace}}
        for n in names
    ]
    listed = {"apiVersion": "v1", "kind": "List", "items": items}
    world.kube.ok("apply", "-f", "-", stdin=json.dumps(listed))


def delete_pools_while_served(kube: Kube, namespaces: set[str]) -> None:
    """Delete the test's pools while an operator still runs to take their finalizers off: a
    pool left behind keeps its namespace terminating for the rest of the session. Fails the
    test when a pool is still there after DELETE_TIMEOUT."""
    for namespace in namespaces:
        kube.run("-n", namespace, "delete", "spotpools", "--all", "--wait=false")
    for namespace in namespaces:
        done = kube.run(
            "-n", namespace, "wait", "--for=delete", "spotpools", "--all",
            f"--timeout={DELETE_TIMEOUT:.0f}s",
        )  # fmt: skip
        left = kube.run("-n", namespace, "get", "spotpools", "-o", "name").stdout.strip()
        assert not left, f"pools of {namespace} still there: {left} ({done.stderr.strip()})"


@contextmanager
def replica_world(
    kube: Kube,
    directory: Path,
    *,
    shards: int,
    s3_backend: bool = False,
    namespace_prefix: str = "rep-",
    refresh_seconds: int = 300,
    env: dict[str, str] | None = None,
    delete_pools: bool = True,
) -> Iterator[Replicas]:
    """An emulator, a backend (a directory both replicas mount, or a local S3 server) and a
    Lease namespace for replicas started with `Replicas.start`; all of it gone on the way out."""
    for tool in ("pulumi", "pulumi-resource-tencentcloud"):
        require_tool(tool)
    with ExitStack() as stack:
        server = stack.enter_context(local_s3(directory / "s3")) if s3_backend else None
        emulator = start_emulator(
            directory / "cloud.db", directory / "emulator.log", boot_seconds=0
        )
        stack.callback(emulator.stop)
        lease_namespace = f"{namespace_prefix}leases-{uuid.uuid4().hex[:6]}"
        kube.ok("create", "namespace", lease_namespace)
        if server is None:
            (directory / "backend").mkdir()
            backend_url, backend_env = f"file://{directory / 'backend'}", {}
        else:
            backend_url, backend_env = server.backend_url, server.env
        replicas = Replicas(
            kube, emulator, directory, lease_namespace, backend_url, backend_env, server,
            namespace_prefix, refresh_seconds, {"SPOTPOOL_SHARDS": str(shards), **(env or {})},
            delete_pools,
        )  # fmt: skip
        stack.callback(replicas.close)
        yield replicas
