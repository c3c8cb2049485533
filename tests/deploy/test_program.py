"""The Pulumi program under Pulumi's mocks: it installs the chart through helm.v4.Chart with
the values, namespace and options the stack's config gives (the kubernetes provider renders
the chart; tests/e2e/test_deploy.py runs it for real)."""

import asyncio
from typing import Any

import pulumi
import pytest
from spotpool_deploy import chart, program

pytestmark = pytest.mark.unit


class KubeMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.declared: dict[tuple[str, str], dict[str, Any]] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.declared[(args.typ, args.name)] = dict(args.inputs)
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
        return {}, []


@pytest.fixture
def mocks(pulumi_event_loop: asyncio.AbstractEventLoop) -> KubeMocks:
    mocks = KubeMocks()
    pulumi.runtime.set_mocks(mocks, project=program.PROJECT, stack="dev", preview=False)
    return mocks


@pulumi.runtime.test
def test_the_stack_config_installs_the_chart_with_its_values(mocks: KubeMocks) -> Any:
    project = program.PROJECT
    pulumi.runtime.set_all_config(
        {
            f"{project}:values": '{"watchNamespaces": ["team-a"], "maxConcurrent": 12,'
            ' "image": {"repository": "registry.example/spotpool", "tag": "2"}}',
            f"{project}:namespace": "ops",
            f"{project}:createNamespace": "false",
            f"{project}:skipAwait": "true",
        }
    )
    install = program.install_from_config(pulumi.Config())
    assert install == program.Install(
        values={"watchNamespaces": ["team-a"], "maxConcurrent": 12,
                "image": {"repository": "registry.example/spotpool", "tag": "2"}},
        namespace="ops", create_namespace=False, install_crd=True, skip_await=True,
    )  # fmt: skip

    def check(_: object) -> None:
        (inputs,) = [i for (typ, _), i in mocks.declared.items() if typ.endswith("Chart")]
        assert [typ for typ, _ in mocks.declared] == ["kubernetes:helm.sh/v4:Chart"]
        assert inputs["chart"] == str(chart.CHART)
        assert inputs["namespace"] == "ops"
        assert inputs["values"] == {**install.values, "createNamespace": False}
        assert (inputs["skipCrds"], inputs["skipAwait"]) == (False, True)

    return program.main().urn.apply(check)


def test_defaults_make_the_namespace_and_the_crd_as_the_kustomization_does() -> None:
    install = program.Install()
    assert install.chart_values() == {"createNamespace": True}
    assert (install.namespace, install.install_crd) == ("spotpool-system", True)


def test_the_default_install_ships_the_network_policy_as_the_chart_and_kustomization_do() -> None:
    """Issue 46: the NetworkPolicy is on by default in every install form."""
    install = program.Install()
    found = chart.objects(chart.template(install.chart_values(), install.namespace))
    (policy,) = [o for o in found if o["kind"] == "NetworkPolicy"]
    assert policy["metadata"]["namespace"] == install.namespace
