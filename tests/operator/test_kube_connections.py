"""The Leases' API client keeps connections of its own: a burst of status writes filling the
shared pool must not make a renewal wait for a connection or pay a new TLS handshake (a
30-minute lease_load run at load 24 slipped 6 shards in one such burst)."""

from pathlib import Path

import pytest
import yaml
from spotpool_operator.reporting.kube import KubeCluster

pytestmark = pytest.mark.unit


def _kubeconfig(tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


def test_the_leases_have_a_connection_pool_of_their_own(tmp_path: Path) -> None:
    cluster = KubeCluster(_kubeconfig(tmp_path))
    leases = cluster.coordination().api_client
    shared = cluster.core().api_client
    assert leases is not shared
    assert leases.rest_client.pool_manager is not shared.rest_client.pool_manager
    # every renewal thread and every round's request keeps a warm connection
    assert leases.configuration.connection_pool_maxsize >= 16
    assert leases.configuration.host == shared.configuration.host


def test_the_shared_pool_holds_a_burst_of_engine_threads_writes(tmp_path: Path) -> None:
    shared = KubeCluster(_kubeconfig(tmp_path)).core().api_client
    assert shared.configuration.connection_pool_maxsize >= 32
