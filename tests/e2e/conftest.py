"""One real kube-apiserver (with etcd) for the e2e tests, with the Spotpool CRD installed."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from spotpool.api.crd import CRD_PATH
from spotpool.cluster.local import down, up
from spotpool.localworld.emulator import start_emulator
from spotpool.localworld.kube import Kube
from spotpool.localworld.operator import OperatorWorld
from tests.conftest import require_tool

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


@pytest.fixture(scope="module", autouse=True)
def keyserver_stacks() -> Iterator[None]:
    """The e2e operators make `keyserver` stacks (engine/keyserver.py): each Pulumi run opens
    its secrets without 1,000,000 PBKDF2 rounds, about half its CPU here, so the e2e modules run
    sooner. The passphrase default keeps its coverage: the engine tests build their settings
    without this variable, and the deploy e2e runs the manifests' own environment."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPOTPOOL_SECRETS_PROVIDER", "keyserver")
        yield


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    with local_cluster(tmp_path_factory.mktemp("cluster")) as cluster:
        cluster.ok("apply", "-f", str(ROOT / CRD_PATH))
        cluster.ok("wait", "--for=condition=Established", "crd/spotpools.devops.jokerbai.com")
        yield cluster


@contextmanager
def operator_world(
    kube: Kube,
    directory: Path,
    boot_seconds: float = 1.0,
    notice_seconds: float = 0.0,
    **options: Any,
) -> Iterator[OperatorWorld]:
    """An emulator and a started operator process on the session's cluster (`options`: the
    OperatorWorld's fields); on the way out both stop and the namespaces it made go."""
    require_tool("pulumi")
    require_tool("pulumi-resource-tencentcloud")
    (directory / "backend").mkdir(exist_ok=True)
    emulator = start_emulator(
        directory / "cloud.db", directory / "emulator.log", boot_seconds=boot_seconds,
        reclaim_notice_seconds=notice_seconds,
    )  # fmt: skip
    operator = OperatorWorld(kube, emulator, directory, **options)
    try:
        operator.start()
        yield operator
    finally:
        operator.stop()
        for namespace in operator.namespaces:
            kube.run("delete", "namespace", namespace, "--wait=false")
        emulator.stop()
