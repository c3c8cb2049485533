"""The chart's alerts, evaluated by Prometheus' own rule engine (`promtool test rules`, built
from the same module as the toolchain's prometheus) on the rules file the chart renders: each
alert against a state that fires it and one that does not. Their expressions name only metrics
and labels the operator exports (or Prometheus adds to every scraped series)."""

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from spotpool_deploy import chart
from spotpool_operator.replicas.shards import ShardMetrics
from spotpool_operator.reporting.metrics import Metrics

from spotpool.api.status import Instance, Phase, SpotpoolStatus
from spotpool.engine.tencent.ratelimit import Buckets
from tests.conftest import require_tool
from tests.deploy.dashboard_queries import exposed, problems

pytestmark = pytest.mark.unit

RULE = "templates/prometheusrule.yaml"
# The labels Prometheus adds to what it scrapes through the ServiceMonitor (honorLabels: a
# pool's own `namespace` wins over the target's).
TARGET = {"job": "spotpool-operator-metrics", "namespace": "spotpool-system"}
ALERTS = ["SpotpoolPoolShortOfCapacity", "SpotpoolOperationsFailing", "SpotpoolCloudApiThrottled",
          "SpotpoolStackLocked", "SpotpoolShardUnheld"]  # fmt: skip


def _rule(values: dict[str, Any] | None = None) -> dict[str, Any]:
    text = chart.template(
        chart.merge_values({"prometheusRule": {"enabled": True}}, values or {}), show_only=RULE
    )
    (rule,) = chart.objects(text)
    return rule


@pytest.fixture(scope="module")
def rules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rules file a Prometheus Operator would hand Prometheus: the rendered spec."""
    file = tmp_path_factory.mktemp("rules") / "spotpool-rules.yaml"
    file.write_text(yaml.safe_dump(_rule()["spec"]))
    return file


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    text = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{text}}}", "values": values}


def _operator(name: str, values: str, **labels: str) -> dict[str, str]:
    """A series of the operator's own (not of a pool): the target's namespace and job."""
    return _series(name, values, **TARGET, **labels)


FAILURES = "spotpool_failures_total"
CALLS = "spotpool_cloud_api_calls_total"
MISSING = "spotpool_pool_missing_instances"
HELD = "spotpool_shard_held"
# alert -> state -> (input series, minute of evaluation, labels of the alerts that fire)
STATES: dict[str, dict[str, tuple[list[dict[str, str]], int, list[dict[str, str]]]]] = {
    "SpotpoolPoolShortOfCapacity": {
        "fires": (  # two instances missing for 20 minutes: sold out, nothing comes
            [_series(MISSING, "2x20", namespace="team-a", pool="gpu", **{"job": TARGET["job"]})],
            15,
            [{"namespace": "team-a", "pool": "gpu", "severity": "warning"}],
        ),
        "quiet": (  # a reclaim replaced within five minutes
            [_series(MISSING, "0 0 1 1 1 1 1 0x15", namespace="team-a", pool="gpu")],
            15,
            [],
        ),
    },
    "SpotpoolOperationsFailing": {
        "fires": (  # an up fails every four minutes (retried with backoff), for 40 minutes
            [_operator(FAILURES, "0+0.25x40", kind="up", reason="ResourceInsufficient")],
            30,
            [{**TARGET, "kind": "up", "reason": "ResourceInsufficient", "severity": "warning"}],
        ),
        "quiet": (  # one failure, then none; locks and throttling are other alerts' business
            [
                _operator(FAILURES, "0x5 1x35", kind="up", reason="CloudError"),
                _operator(FAILURES, "0+1x40", kind="up", reason="StackLocked"),
                _operator(FAILURES, "0+1x40", kind="refresh", reason="Throttled"),
            ],
            30,
            [],
        ),
    },
    "SpotpoolCloudApiThrottled": {
        "fires": (  # the fleet probe's DescribeInstances answered RequestLimitExceeded
            [
                _operator(CALLS, "0+1x40", action="DescribeInstances", result="throttled"),
                _operator(CALLS, "0+20x40", action="DescribeInstances", result="ok"),
            ],
            30,
            [{**TARGET, "severity": "warning"}],
        ),
        "fires inside Pulumi runs": (  # the provider's calls: operations fail Throttled
            [_operator(FAILURES, "0+0.5x40", kind="up", reason="Throttled")],
            30,
            [{**TARGET, "severity": "warning"}],
        ),
        "quiet": (  # throttled once, long before the window; calls succeed since
            [
                _operator(CALLS, "0 3x39", action="RunInstances", result="throttled"),
                _operator(CALLS, "0+20x40", action="DescribeInstances", result="ok"),
            ],
            30,
            [],
        ),
    },
    "SpotpoolStackLocked": {
        "fires": (  # a person's `pulumi up` holds the lock for 40 minutes
            [_operator(FAILURES, "0+0.5x40", kind="up", reason="StackLocked")],
            30,
            [{**TARGET, "severity": "warning"}],
        ),
        "quiet": (  # locked once (the person's run ended), then the operation went through
            [_operator(FAILURES, "0x5 1x35", kind="up", reason="StackLocked")],
            30,
            [],
        ),
    },
    "SpotpoolShardUnheld": {
        "fires": (  # both replicas run, neither holds shard 3 (shard 0 is held)
            [
                _operator(HELD, "0x20", shard="3", pod="op-a"),
                _operator(HELD, "0x20", shard="3", pod="op-b"),
                _operator(HELD, "1x20", shard="0", pod="op-a"),
                _operator(HELD, "0x20", shard="0", pod="op-b"),
            ],
            10,
            [{**TARGET, "shard": "3", "severity": "critical"}],
        ),
        "quiet": (  # a handover: op-a gives shard 3 back, op-b takes it a minute later
            [
                _operator(HELD, "1x5 0x15", shard="3", pod="op-a"),
                _operator(HELD, "0x6 1x14", shard="3", pod="op-b"),
            ],
            10,
            [],
        ),
    },
}


def _annotations(rule: dict[str, Any], labels: dict[str, str], value: str) -> dict[str, str]:
    """The rule's annotations as Prometheus expands them for one alert."""

    def expand(text: str) -> str:
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m[1]], text)
        return text.replace("{{ $value }}", value)

    return {key: expand(text) for key, text in rule["annotations"].items()}


def _promtool_test(
    rules: Path, alert: str, state: str, expect: list[dict[str, str]] | None = None
) -> subprocess.CompletedProcess[str]:
    series, minute, firing = STATES[alert][state]
    (rule,) = [r for r in yaml.safe_load(rules.read_text())["groups"][0]["rules"]
               if r["alert"] == alert]  # fmt: skip
    value = series[0]["values"].split("x")[0].split("+")[0].split()[0]
    expected = firing if expect is None else expect
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [{
                "eval_time": f"{minute}m",
                "alertname": alert,
                "exp_alerts": [
                    {"exp_labels": labels, "exp_annotations": _annotations(rule, labels, value)}
                    for labels in expected
                ],
            }],
        }],
    }  # fmt: skip
    file = rules.parent / f"{alert}-{state.replace(' ', '-')}.test.yaml"
    file.write_text(yaml.safe_dump(test))
    return subprocess.run(
        [str(require_tool("promtool")), "test", "rules", str(file)],
        capture_output=True,
        text=True,
        timeout=60,
    )


CASES = [(alert, state) for alert, states in STATES.items() for state in states]


@pytest.mark.parametrize(("alert", "state"), CASES, ids=[f"{a}-{s}" for a, s in CASES])
def test_prometheus_fires_each_alert_in_its_state_and_not_otherwise(
    rules: Path, alert: str, state: str
) -> None:
    done = _promtool_test(rules, alert, state)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_fails_an_expectation_the_rules_do_not_meet(rules: Path) -> None:
    """The check can fail: a quiet state expected to fire, a firing one expected quiet."""
    firing = STATES["SpotpoolStackLocked"]["fires"][2]
    wrong = _promtool_test(rules, "SpotpoolStackLocked", "quiet", expect=firing)
    assert wrong.returncode != 0 and "SpotpoolStackLocked" in wrong.stdout + wrong.stderr
    assert _promtool_test(rules, "SpotpoolShardUnheld", "fires", expect=[]).returncode != 0


def test_the_rules_file_is_valid_and_every_alert_is_tested(rules: Path) -> None:
    checked = subprocess.run(
        [str(require_tool("promtool")), "check", "rules", str(rules)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    names = [r["alert"] for r in yaml.safe_load(rules.read_text())["groups"][0]["rules"]]
    assert names == ALERTS == list(STATES)
    for alert, states in STATES.items():
        assert "quiet" in states and any(s.startswith("fires") for s in states), alert


def test_the_alerts_query_only_what_the_operator_exports(rules: Path) -> None:
    metrics = Metrics()
    metrics.watch_buckets(buckets := Buckets())
    ShardMetrics(metrics.registry, 4)
    buckets.bucket("AKIDexample", "ap-singapore", "DescribeInstances").take()
    status = SpotpoolStatus(
        replicas=2, ready_replicas=1, size=1, phase=Phase.CONVERGING,
        instances=[Instance(instance_id="ins-1", slot=0, zone="ap-singapore-2",
                            instance_type="GN7.2XLARGE32", state="RUNNING")],
    )  # fmt: skip
    metrics.observe_pool("team-a", "gpu", status)
    metrics.observe_failure("up", "StackLocked")
    metrics.observe_cloud_call("DescribeInstances", "throttled")
    series = {
        name: labels | {"job", "namespace", "instance", "pod", "service"}
        for name, labels in exposed(generate_latest(metrics.registry).decode()).items()
    }
    groups = yaml.safe_load(rules.read_text())["groups"]
    as_panels = {
        "panels": [
            {"id": i, "title": r["alert"], "targets": [{"refId": "A", "expr": r["expr"]}]}
            for i, r in enumerate(groups[0]["rules"])
        ],
        "templating": {"list": []},
    }
    assert problems(as_panels, series) == []


def test_the_rule_is_optional_and_each_alert_is_tuned_by_values() -> None:
    assert "PrometheusRule" not in {o["kind"] for o in chart.objects(chart.template({}))}
    rule = _rule(
        {"prometheusRule": {
            "namespace": "monitoring", "labels": {"release": "kps"},
            "alertLabels": {"team": "platform"},
            "alerts": {"stackLocked": {"enabled": False},
                       "shardUnheld": {"for": "1m", "severity": "page"}},
        }}
    )  # fmt: skip
    assert rule["metadata"]["namespace"] == "monitoring"
    assert rule["metadata"]["labels"]["release"] == "kps"
    by_name = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    assert "SpotpoolStackLocked" not in by_name and len(by_name) == 4
    assert by_name["SpotpoolShardUnheld"]["for"] == "1m"
    assert by_name["SpotpoolShardUnheld"]["labels"] == {"severity": "page", "team": "platform"}
    assert json.dumps(rule).count("{{ $labels.") >= 4  # Prometheus' templates, not Helm's
