"""The dashboard against the real operator: a pool converged, reclaimed and replaced, another
failing; then every metric and label the dashboard's panels query is in the operator's
/metrics, and `kubectl get spotpools -o wide` shows the reclaims and the last operation."""

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from spotpool.localworld.kube import Kube
from spotpool.localworld.prometheus import PrometheusProcess
from spotpool.localworld.prometheus import start as start_prometheus
from tests.conftest import require_tool
from tests.deploy.dashboard_queries import DASHBOARD, concrete, exposed, problems, queries
from tests.deploy.rendered import objects
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    directory = tmp_path_factory.mktemp("operator-dashboard")
    with operator_world(kube, directory, namespace_prefix="dash-") as world:
        yield world


@pytest.fixture(scope="module")
def prometheus(
    world: OperatorWorld, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusProcess]:
    """A real Prometheus scraping the operator every second, from before the pools exist."""
    require_tool("prometheus")
    server = start_prometheus(
        tmp_path_factory.mktemp("prometheus"), [f"127.0.0.1:{world.metrics_port}"]
    )
    try:
        world.wait_until(server.targets_up, "Prometheus scraping the operator", timeout=30)
        yield server
    finally:
        server.stop()


def test_the_dashboard_queries_only_what_the_running_operator_exports(
    world: OperatorWorld, prometheus: PrometheusProcess
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

    # The learned rates are exported when the learner syncs its counts (every 30 s).
    learned = "spotpool_offering_interruption_rate{"
    world.wait_until(lambda: learned in world.metrics(), "the learned rate exported", 120)
    text = world.metrics()
    assert problems(json.loads(DASHBOARD.read_text()), exposed(text)) == []
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


def test_every_dashboard_query_returns_data_from_a_real_prometheus(
    world: OperatorWorld, prometheus: PrometheusProcess
) -> None:
    """After the converge and the reclaim above (and one throttled call), every panel's query
    and every variable's values, as Grafana sends them, return data from Prometheus."""
    # The throttled-calls panel needs a throttled call: the cloud answers one with
    # RequestLimitExceeded, as Tencent does under a storm.
    throttle = {"Action": "DescribeInstances", "Code": "RequestLimitExceeded", "Rate": 1.0}
    world.emulator.admin_ok("POST", "/_emulator/faults", throttle)
    try:
        world.wait_until(lambda: 'result="throttled"' in world.metrics(), "a throttled call")
    finally:
        world.emulator.admin_ok("DELETE", "/_emulator/faults")
    ns = next(n for n in world.namespaces if n.startswith("dash-"))
    variables = {"namespace": ns, "pool": ".*"}
    empty: list[str] = []

    def every_query_answers() -> bool:
        empty.clear()
        for query in queries(json.loads(DASHBOARD.read_text())):
            expr = concrete(_with_variables(query.expr, variables))
            if not prometheus.query(expr):
                empty.append(f"{query.where}: {expr}")
        for name in ("namespace", "pool"):
            if not prometheus.query(f"count by ({name}) (spotpool_pool_desired_instances)"):
                empty.append(f"variable {name}")
        return not empty

    world.wait_until(every_query_answers, f"data for every panel (still empty: {empty})",
                     timeout=90)  # fmt: skip


def _with_variables(expr: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)
    return expr


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


def test_the_install_service_monitor_is_accepted_by_the_prometheus_operator_crd(
    kube: Kube, tmp_path: Path
) -> None:
    """The Prometheus Operator's own ServiceMonitor CRD (from its module, via the toolchain) on
    the local API server, and the install's ServiceMonitor applied against its schema with
    strict field validation: an unknown or misplaced field would be refused."""
    crd = require_tool("prometheus").parent / "monitoring.coreos.com_servicemonitors.yaml"
    kube.ok("apply", "--server-side", "-f", str(crd))
    kube.ok("wait", "--for=condition=Established", "crd/servicemonitors.monitoring.coreos.com")
    values = {"monitoring": {"serviceMonitor": True, "serviceMonitorLabels": {"release": "kps"}}}
    (monitor,) = [o for o in objects(values) if o["kind"] == "ServiceMonitor"]
    namespace = monitor["metadata"]["namespace"]
    kube.run("create", "namespace", namespace)  # may exist from another test
    manifest = tmp_path / "servicemonitor.yaml"
    manifest.write_text(yaml.safe_dump(monitor))
    kube.ok("apply", "--validate=strict", "-f", str(manifest))
    stored = json.loads(kube.ok("-n", namespace, "get", "servicemonitor",
                                monitor["metadata"]["name"], "-o", "json"))  # fmt: skip
    assert _within(monitor["spec"], stored["spec"])  # kept as written (defaults may be added)
    kube.ok("-n", namespace, "delete", "servicemonitor", monitor["metadata"]["name"])


def test_the_charts_prometheus_rule_is_accepted_by_the_prometheus_operator_crd(
    kube: Kube, tmp_path: Path
) -> None:
    """The Prometheus Operator's PrometheusRule CRD (from its module, beside promtool) and the
    chart's rule, rendered with every alert on, applied with strict field validation."""
    crd = require_tool("promtool").parent / "monitoring.coreos.com_prometheusrules.yaml"
    kube.ok("apply", "--server-side", "-f", str(crd))
    kube.ok("wait", "--for=condition=Established", "crd/prometheusrules.monitoring.coreos.com")
    values = {"prometheusRule": {"enabled": True, "alertLabels": {"team": "platform"}}}
    (rule,) = [o for o in objects(values) if o["kind"] == "PrometheusRule"]
    namespace = rule["metadata"]["namespace"]
    kube.run("create", "namespace", namespace)  # may exist from another test
    manifest = tmp_path / "prometheusrule.yaml"
    manifest.write_text(yaml.safe_dump(rule))
    kube.ok("apply", "--validate=strict", "-f", str(manifest))
    stored = json.loads(kube.ok("-n", namespace, "get", "prometheusrule",
                                rule["metadata"]["name"], "-o", "json"))  # fmt: skip
    assert _within(rule["spec"], stored["spec"])
    kube.ok("-n", namespace, "delete", "prometheusrule", rule["metadata"]["name"])


def _within(wanted: object, stored: object) -> bool:
    if isinstance(wanted, dict) and isinstance(stored, dict):
        return all(k in stored and _within(v, stored[k]) for k, v in wanted.items())
    if isinstance(wanted, list) and isinstance(stored, list):
        return len(wanted) == len(stored) and all(map(_within, wanted, stored))
    return wanted == stored
