"""The Pulumi program of the install: the Helm chart, through pulumi-kubernetes' `helm.v4.Chart`
(the kubernetes provider renders it as `helm template` does and manages each object).

Run as the `spotpool-operator` Pulumi project in operator/deploy (`pulumi up` there), or inline
through the Automation API (`spotpool deploy run up`). Stack config: `values` (the chart's
values, as in a values file), `namespace`, `createNamespace`, `installCrd`, `skipAwait`.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from spotpool_deploy import chart

PROJECT = "spotpool-operator"


@dataclass(frozen=True)
class Install:
    """What the program is told: the chart's values and where the operator runs."""

    values: Mapping[str, Any] = field(default_factory=dict)
    namespace: str = chart.NAMESPACE
    create_namespace: bool = True  # a Pulumi install owns its namespace, as kubectl's does
    install_crd: bool = True  # false: the CRD is managed elsewhere (another install)
    skip_await: bool = False  # clusters where no pod ever runs (no kubelet)

    def chart_values(self) -> dict[str, Any]:
        return chart.merge_values({"createNamespace": self.create_namespace}, self.values)


def declare(install: Install) -> k8s.helm.v4.Chart:
    release = k8s.helm.v4.Chart(
        chart.RELEASE,
        chart=str(chart.CHART),
        namespace=install.namespace,
        values=install.chart_values(),
        skip_crds=not install.install_crd,
        skip_await=install.skip_await,
    )
    pulumi.export("namespace", install.namespace)
    pulumi.export("watchNamespaces", list(install.values.get("watchNamespaces") or []) or "all")
    return release


def install_from_config(cfg: pulumi.Config) -> Install:
    """`pulumi config set --path 'values.watchNamespaces[0]' team-a`, `pulumi config set
    namespace ops`, …"""
    return Install(
        values=cfg.get_object("values") or {},
        namespace=cfg.get("namespace") or chart.NAMESPACE,
        create_namespace=cfg.get_bool("createNamespace", True),
        install_crd=cfg.get_bool("installCrd", True),
        skip_await=cfg.get_bool("skipAwait", False),
    )


def main() -> k8s.helm.v4.Chart:
    return declare(install_from_config(pulumi.Config()))
