"""What the Grafana dashboard asks Prometheus: every PromQL expression of its panels and
variables, parsed (promql-parser), down to the metric names and labels it needs."""

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import promql_parser
from spotpool_deploy import chart

DASHBOARD = chart.CHART / "dashboards" / "spotpool.json"  # the chart's Grafana dashboard
# Values Grafana puts in place of its variables before a query leaves it.
GRAFANA_DURATIONS = {"__rate_interval": "2m", "__interval": "30s", "__range": "1h"}
LABEL_VALUES = re.compile(r"^label_values\((?:(?P<selector>.+),\s*)?(?P<label>\w+)\)$")


@dataclass
class Query:
    where: str  # panel title / refId, or the variable's name
    expr: str  # as written in the dashboard
    selectors: dict[str, set[str]] = field(default_factory=dict)  # metric -> labels matched
    grouping: set[str] = field(default_factory=set)  # labels of by (...) clauses and legends


def concrete(expr: str) -> str:
    """The expression as Prometheus receives it: Grafana's variables replaced."""
    for name, value in GRAFANA_DURATIONS.items():
        expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)
    return re.sub(r"\$\{?(\w+)\}?", "example", expr)


def parse(where: str, expr: str) -> Query:
    query = Query(where, expr)
    tree = promql_parser.parse(concrete(expr))

    def visit(node: promql_parser.Expr) -> bool:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            labels = {m.name for m in node.matchers.matchers}
            query.selectors.setdefault(node.name, set()).update(labels)
        if isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            query.grouping.update(node.modifier.labels)
        return True

    promql_parser.walk(tree, visit)
    return query


def queries(dashboard: dict[str, Any]) -> Iterator[Query]:
    """Every panel target's expression and every query variable's selector."""
    for panel in panels(dashboard):
        for target in panel.get("targets") or []:
            query = parse(f"{panel['title']} / {target['refId']}", target["expr"])
            legend = target.get("legendFormat") or ""
            query.grouping.update(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
            yield query
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        text = variable["query"]["query"] if isinstance(variable["query"], dict) else ""
        found = LABEL_VALUES.match(text or variable["query"])
        assert found and found["selector"], f"variable {variable['name']}: {text!r}"
        query = parse(f"variable {variable['name']}", found["selector"])
        query.grouping.add(found["label"])
        yield query


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels") or []


def exposed(text: str) -> dict[str, set[str]]:
    """Series name -> label names, from a /metrics exposition (families without samples have
    no series: a metric nobody has set yet is not there)."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, set()).update(sample.labels)
    return found


def problems(dashboard: dict[str, Any], series: dict[str, set[str]]) -> list[str]:
    """What the dashboard queries that `series` (see exposed) lacks: a metric, or a label it
    matches on or groups by."""
    found = []
    for query in queries(dashboard):
        available: set[str] = {"le"}
        for name, labels in query.selectors.items():
            if name not in series:
                found.append(f"{query.where}: no metric {name} (in {query.expr})")
                continue
            available |= series[name]
            if labels - series[name]:
                found.append(f"{query.where}: {name} has no label {sorted(labels - series[name])}")
        if query.selectors and all(n in series for n in query.selectors):
            missing = query.grouping - available
            if missing:
                found.append(
                    f"{query.where}: no label {sorted(missing)} to group by in {query.expr}"
                )
    return found
