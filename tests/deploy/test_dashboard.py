"""The Grafana dashboard: a valid dashboard model whose every query names metrics and labels
the operator exports, shipped as a ConfigMap the Grafana sidecar picks up, and an optional
ServiceMonitor."""

import json
from typing import Any

import pytest
from prometheus_client import generate_latest
from spotpool_operator.replicas.shards import ShardMetrics
from spotpool_operator.reporting.metrics import Metrics
from spotpool_operator.reporting.offering_metrics import OfferingMetrics

from spotpool.api.interruptions import Learned
from spotpool.api.status import Instance, Phase, PlacedOffering, SpotpoolStatus
from spotpool.engine.tencent.ratelimit import Buckets
from tests.deploy.dashboard_queries import DASHBOARD, exposed, panels, problems, queries
from tests.deploy.rendered import objects, refusal

pytestmark = pytest.mark.unit


PANEL_TYPES = {"row", "stat", "timeseries", "bargauge", "table", "gauge", "heatmap", "text"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    found: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return found


def test_the_dashboard_is_a_grafana_dashboard_model(dashboard: dict[str, Any]) -> None:
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] == "spotpool-operator" and dashboard["title"]
    assert "id" not in dashboard or dashboard["id"] is None  # provisioned: Grafana assigns it
    ids = [panel["id"] for panel in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in panels(dashboard):
        assert panel["type"] in PANEL_TYPES, panel["title"]
        place = panel["gridPos"]
        assert place["x"] >= 0 and place["w"] > 0 and place["x"] + place["w"] <= 24, panel
        if panel["type"] == "row":
            continue
        assert panel["title"] and panel["description"], panel["title"]
        assert panel["datasource"] == DATASOURCE, panel["title"]  # no data source uid baked in
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
    # no two panels overlap on the grid
    cells: set[tuple[int, int]] = set()
    for panel in panels(dashboard):
        place = panel["gridPos"]
        area = {
            (x, y)
            for x in range(place["x"], place["x"] + place["w"])
            for y in range(place["y"], place["y"] + place["h"])
        }
        assert not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area
    used = {
        name for q in queries(dashboard) for name in ("namespace", "pool") if f"${name}" in q.expr
    }
    assert used <= set(variables)


def test_every_query_parses_and_names_what_the_operator_exports(
    dashboard: dict[str, Any],
) -> None:
    metrics = Metrics()
    metrics.watch_buckets(buckets := Buckets())
    shards = ShardMetrics(metrics.registry, 4)  # the runner registers them beside (shards.py)
    shards.transitions.labels("0", "acquired").inc()
    buckets.bucket("AKIDexample", "ap-singapore", "DescribeInstances").take()
    status = SpotpoolStatus(
        replicas=2, ready_replicas=1, size=1, phase=Phase.CONVERGING,
        hourly_cost=0.444, on_demand_hourly_cost=2.22,
        instances=[Instance(instance_id="ins-1", slot=0, zone="ap-singapore-2",
                            instance_type="GN7.2XLARGE32", state="RUNNING")],
    )  # fmt: skip
    metrics.observe_pool("team-a", "gpu", status)
    metrics.observe_reclaims("team-a", "gpu", status, [0])
    metrics.observe_operation("up", True, 3.0)
    metrics.observe_failure("up", "ResourceInsufficient")
    metrics.observe_cloud_call("DescribeInstances", "ok")
    metrics.reclaim_to_replaced.observe(2.5)
    offerings = OfferingMetrics(metrics.registry)  # the runner registers them beside
    row = PlacedOffering(zone="ap-singapore-2", instance_type="GN7.2XLARGE32", price=0.6,
                         stock="EnoughStock")  # fmt: skip
    offerings.observe_offerings("acct", "ap-singapore", [row])
    offerings.observe_learned({("acct", "ap-singapore", "ap-singapore-2", "GN7.2XLARGE32"):
                               Learned(2, 3)})  # fmt: skip

    assert problems(dashboard, exposed(generate_latest(metrics.registry).decode())) == []
    # the panels the issue names are all there
    names = {name for query in queries(dashboard) for name in query.selectors}
    assert names >= {
        "spotpool_pools", "spotpool_pool_desired_instances", "spotpool_pool_ready_instances",
        "spotpool_reclaims_total", "spotpool_reclaim_replaced_seconds_bucket",
        "spotpool_pool_missing_instances", "spotpool_pool_short_seconds_total",
        "spotpool_operations_total", "spotpool_operation_duration_seconds_bucket",
        "spotpool_operations_in_flight", "spotpool_operations_queued",
        "spotpool_cloud_api_calls_total", "spotpool_cloud_api_bucket_fill_ratio",
        "spotpool_failures_total", "spotpool_shard_held", "spotpool_shard_pools",
        "spotpool_notice_reports_total", "spotpool_surges_total",
        "spotpool_pool_hourly_cost", "spotpool_pool_hourly_savings",
    }  # fmt: skip


def test_a_query_with_an_unknown_metric_or_label_is_caught() -> None:
    broken = {
        "panels": [
            {"id": 1, "title": "typo", "targets": [
                {"refId": "A", "expr": "sum(rate(spotpool_reclaim_total[5m]))"},
                {"refId": "B", "expr": "sum by (zone) (spotpool_pool_ready_instances)"},
            ]},
        ],
        "templating": {"list": []},
    }  # fmt: skip
    series = {"spotpool_pool_ready_instances": {"namespace", "pool"}}
    found = problems(broken, series)
    assert any("no metric spotpool_reclaim_total" in p for p in found)
    assert any("no label ['zone']" in p for p in found)


def test_the_install_ships_the_dashboard_for_the_grafana_sidecar() -> None:
    (config_map,) = [o for o in objects() if o["kind"] == "ConfigMap"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == "spotpool-system"
    assert config_map["data"]["spotpool.json"] == DASHBOARD.read_text()  # the file, unchanged
    assert not [o for o in objects() if o["kind"] == "ServiceMonitor"]  # off

    elsewhere = {"monitoring": {"dashboardNamespace": "monitoring", "dashboardFolder": "Spotpool"}}
    (config_map,) = [o for o in objects(elsewhere) if o["kind"] == "ConfigMap"]
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Spotpool"}
    off = {"monitoring": {"dashboard": False}}
    assert not [o for o in objects(off) if o["kind"] == "ConfigMap"]


def test_the_service_monitor_scrapes_the_metrics_service_keeping_the_pools_namespace() -> None:
    monitor_on = {"serviceMonitor": True, "serviceMonitorLabels": {"release": "kps"}}
    found = objects({"monitoring": monitor_on})
    (monitor,) = [o for o in found if o["kind"] == "ServiceMonitor"]
    (service,) = [o for o in found if o["kind"] == "Service"]
    assert monitor["metadata"]["labels"]["release"] == "kps"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["honorLabels"] is True  # the pool's `namespace`, not the operator's
    assert endpoint["interval"] == "30s"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["spotpool-system"]}


def test_bad_monitoring_values_say_what_to_fix() -> None:
    assert "scrapeInterval" in refusal({"monitoring": {"scrapeInterval": "0"}})
    assert "dashboardNamespace" in refusal({"monitoring": {"dashboardNamespace": "Monitoring"}})
    assert "/metrics/service" in refusal(
        {"monitoring": {"serviceMonitor": True}, "metrics": {"service": False}}
    )
