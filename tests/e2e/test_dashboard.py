"""The dashboard against the real operator: a pool converged, reclaimed and replaced, another
failing; then every metric and label the dashboard's panels query is in the operator's
/metrics, and `kubectl get spotpools -o wide` shows the reclaims and the last operation."""

import re
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from spotpool_deploy import monitoring

from spotpool.localworld.kube import Kube
from tests.deploy.dashboard_queries import exposed, problems
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    directory = tmp_path_factory.mktemp("operator-dashboard")
    with operator_world(kube, directory, namespace_prefix="dash-") as world:
        yield world


def test_the_dashboard_queries_only_what_the_running_operator_exports(
    world: OperatorWorld,
) -> None:
    ns = world.namespace()
    world.apply(ns, pool_manifest("watched", replicas=1, refreshInterval="10s"))
    world.apply(ns, pool_manifest("keyless", credentialsSecretRef={"name": "missing"}))
    pool = world.wait_ready(ns, "watched", 1)
    (victim,) = [i["instanceId"] for i in pool["status"]["instances"]]
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [victim]})

    def replaced() -> bool:
        status = world.status(ns, "watched")
        ids = [i["instanceId"] for i in status.get("instances") or []]
        return bool(status.get("phase") == "Ready" and ids and victim not in ids)

    world.wait_until(replaced, "the reclaimed instance's replacement")
    world.wait_until(lambda: world.status(ns, "keyless").get("phase") == "Degraded", "Degraded")

    text = world.metrics()
    assert problems(monitoring.dashboard(), exposed(text)) == []
    reclaimed = {"namespace": ns, "pool": "watched", "zone": "ap-singapore-2",
                 "instance_type": "GN7.2XLARGE32"}  # fmt: skip
    assert _value(text, "spotpool_reclaims_total", **reclaimed) == 1
    assert _value(text, "spotpool_reclaim_replaced_seconds_count") >= 1
    assert _value(text, "spotpool_pools", phase="Ready") >= 1
    assert _value(text, "spotpool_pools", phase="Degraded") >= 1
    assert _value(text, "spotpool_pool_missing_instances", namespace=ns, pool="watched") == 0
    assert _value(text, "spotpool_pool_short_seconds_total", namespace=ns, pool="watched") > 0
    assert sum(_values(text, "spotpool_failures_total", kind="up")) >= 1
    ok = {"action": "DescribeInstances", "result": "ok"}
    assert _value(text, "spotpool_cloud_api_calls_total", **ok) >= 1
    bucket = {"region": "ap-singapore", "action": "DescribeInstances"}
    assert 0 <= _value(text, "spotpool_cloud_api_bucket_fill_ratio", **bucket) <= 1

    wide = world.kube.ok("-n", ns, "get", "spotpools", "-o", "wide")
    header, *rows = wide.splitlines()
    assert header.split()[-4:] == ["RECLAIMS", "LAST-RECLAIM", "LAST-OP", "RESULT"], wide
    (watched,) = [row.split() for row in rows if row.startswith("watched ")]
    assert watched[-4] == "1" and re.fullmatch(r"\d+[smh]", watched[-3]), wide
    assert watched[-2:] == ["up", "succeeded"], wide
    narrow = world.kube.ok("-n", ns, "get", "spotpools")
    assert "RECLAIMS" not in narrow  # priority 1: only with -o wide


def _values(text: str, name: str, **labels: str) -> list[float]:
    """Every sample of `name` whose labels include `labels`."""
    return [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    ]


def _value(text: str, name: str, **labels: str) -> float:
    (found,) = _values(text, name, **labels)
    return found
