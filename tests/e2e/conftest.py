"""The e2e worlds, each written once: the session's kube-apiserver (with etcd) with the
Spotpool CRD installed (`kube`); a cluster of a module's own for the install tests
(`private_cluster`); one operator on an emulator (`operator_world`), with its
termination-notice port open (`notice_world`); operator replicas sharing one backend
(`replicas`); a Lease namespace with a stallable API-server proxy (`lease_world`). The S3
server is tests/conftest.py's `s3_server`. Modules set a world's options by overriding
`notice_options` or `replica_options`."""

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from spotpool.api.crd import ACCESS_CRD_PATH, CRD_PATH
from spotpool.cluster.local import down, up
from spotpool.localworld.emulator import start_emulator
from spotpool.localworld.kube import Kube
from spotpool.localworld.nodes import NodeWorld
from spotpool.localworld.operator import OperatorWorld
from spotpool.localworld.slow_proxy import StallProxy, target_of
from spotpool.ports import free_port
from tests.conftest import require_tool
from tests.e2e._support.replicas import Replicas, replica_world

ROOT = Path(__file__).parents[2]


@contextmanager
def local_cluster(directory: Path) -> Iterator[Kube]:
    """`spotpool cluster up` in `directory`, down again on the way out."""
    require_tool("etcd")
    require_tool("kube-apiserver")
    kubectl = require_tool("kubectl")
    state = up(directory, tie_to_parent=True)
    try:
        yield Kube(state.kubeconfig, kubectl)
    finally:
        down(directory)


@pytest.fixture(scope="module")
def keyserver_stacks() -> Iterator[None]:
    """Opt-in (a module's `pytestmark = pytest.mark.usefixtures("keyserver_stacks")`): its
    operators make `keyserver` stacks (engine/state/keyserver.py), whose Pulumi runs open their
    secrets without 1,000,000 PBKDF2 rounds, about half a run's CPU here. Every other e2e
    module runs what users get by default (the chart's and the manifests' `passphrase`)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPOTPOOL_SECRETS_PROVIDER", "keyserver")
        yield


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    with local_cluster(tmp_path_factory.mktemp("cluster")) as cluster:
        cluster.ok("apply", "-f", str(ROOT / CRD_PATH), "-f", str(ROOT / ACCESS_CRD_PATH))
        cluster.ok("wait", "--for=condition=Established", "crd/spotpools.devops.jokerbai.com",
                   "crd/spotpoolaccesspolicies.devops.jokerbai.com")  # fmt: skip
        yield cluster


@contextmanager
def operator_world(
    kube: Kube,
    directory: Path,
    boot_seconds: float = 1.0,
    notice_seconds: float = 0.0,
    emulator_args: list[str] | None = None,
    nodes: bool | dict[str, Any] = False,
    **options: Any,
) -> Iterator[OperatorWorld]:
    """An emulator (`emulator_args`: more of its serve options) and a started operator process
    on the session's cluster (`options`: the OperatorWorld's fields); on the way out both stop
    and the namespaces it made go. With `nodes` (True, or NodeWorld's options such as
    `{"lease_seconds": 20}`), the cluster has nodes for the world's life: kube-scheduler, KWOK
    and the node agent, which registers a Node for each instance whose user data holds the
    line `# spotpool:join-node` (docs/nodes.md); `world.nodes` is that NodeWorld."""
    require_tool("pulumi")
    require_tool("pulumi-resource-tencentcloud")
    if nodes:
        require_tool("kube-scheduler")
        require_tool("kwok")
    (directory / "backend").mkdir(exist_ok=True)
    emulator = start_emulator(
        directory / "cloud.db", directory / "emulator.log", boot_seconds=boot_seconds,
        reclaim_notice_seconds=notice_seconds, extra_args=emulator_args,
    )  # fmt: skip
    operator = OperatorWorld(kube, emulator, directory, **options)
    if nodes:
        node_options = nodes if isinstance(nodes, dict) else {}
        # The session's cluster: `up` wrote its kubeconfig into its own directory.
        operator.nodes = NodeWorld(kube.kubeconfig.parent, emulator, directory, **node_options)
    try:
        if operator.nodes is not None:
            operator.nodes.start()
        operator.start()
        yield operator
    finally:
        operator.stop()
        if operator.nodes is not None:
            operator.nodes.stop()
        operator.release_namespaces()
        emulator.stop()


@pytest.fixture(scope="module")
def private_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """A kube-apiserver of the module's own, without the CRD: the install tests (kustomize,
    helm, upgrades) install and delete cluster-wide objects the session's cluster keeps."""
    with local_cluster(tmp_path_factory.mktemp("private-cluster")) as cluster:
        yield cluster


@pytest.fixture
def notice_options() -> dict[str, Any]:
    """`notice_world`'s options (operator_world's); a module overrides this fixture."""
    return {}


@pytest.fixture
def notice_world(
    kube: Kube, tmp_path_factory: pytest.TempPathFactory, notice_options: dict[str, Any]
) -> Iterator[OperatorWorld]:
    """An operator whose termination-notice endpoint listens on a free port (its env's
    SPOTPOOL_NOTICE_PORT), refreshing every minute: notices, not refreshes, drive its pools."""
    options = {"refresh_seconds": 60, "namespace_prefix": "notice-", **notice_options}
    env = {"SPOTPOOL_NOTICE_PORT": str(free_port()), **options.pop("env", {})}
    with operator_world(kube, tmp_path_factory.mktemp("notices"), env=env, **options) as world:
        yield world


@pytest.fixture
def replica_options() -> dict[str, Any]:
    """`replicas`' options (replica_world's: shards, s3_backend, refresh_seconds, env, ...); a
    module overrides this fixture."""
    return {"shards": 2}


@pytest.fixture
def replicas(kube: Kube, tmp_path: Path, replica_options: dict[str, Any]) -> Iterator[Replicas]:
    """Operator replicas on one emulator and one backend, started by the test
    (`replicas.start(name)`); their pools deleted and every replica stopped at the end."""
    with replica_world(kube, tmp_path, **replica_options) as world:
        yield world


@pytest.fixture
def lease_world(kube: Kube, tmp_path: Path) -> Iterator[tuple[Kube, str, StallProxy, Path]]:
    """A namespace for Leases and a TCP proxy to the API server a test stalls at will: (the
    cluster, the namespace, the proxy, a kubeconfig through the proxy)."""
    namespace = f"fencing-{uuid.uuid4().hex[:6]}"
    kube.ok("create", "namespace", namespace)
    proxy = StallProxy(*target_of(kube.kubeconfig))
    proxied = proxy.kubeconfig(kube.kubeconfig, tmp_path / "kubeconfig-via-proxy")
    try:
        yield kube, namespace, proxy, proxied
    finally:
        proxy.stalled.clear()
        proxy.close()
        kube.run("delete", "namespace", namespace, "--wait=false")
