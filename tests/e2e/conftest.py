"""One real kube-apiserver (with etcd) for the e2e tests, with the Spotpool CRD installed."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from spotpool.api.crd import CRD_PATH
from spotpool.cluster.local import down, up
from spotpool.localworld.kube import Kube
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


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    with local_cluster(tmp_path_factory.mktemp("cluster")) as cluster:
        cluster.ok("apply", "-f", str(ROOT / CRD_PATH))
        cluster.ok("wait", "--for=condition=Established", "crd/spotpools.devops.jokerbai.com")
        yield cluster
