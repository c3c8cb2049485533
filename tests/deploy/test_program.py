"""The Pulumi program under Pulumi's mocks: it declares exactly the install's objects."""

import asyncio
from typing import Any

import pulumi
import pytest
from spotpool_deploy import program
from spotpool_deploy.config import InstallConfig
from spotpool_deploy.objects import identity, render

TYPES = {
    "Namespace": "kubernetes:core/v1:Namespace",
    "CustomResourceDefinition": "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition",
    "ServiceAccount": "kubernetes:core/v1:ServiceAccount",
    "ClusterRole": "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
    "ClusterRoleBinding": "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
    "Role": "kubernetes:rbac.authorization.k8s.io/v1:Role",
    "RoleBinding": "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding",
    "PersistentVolumeClaim": "kubernetes:core/v1:PersistentVolumeClaim",
    "Deployment": "kubernetes:apps/v1:Deployment",
    "PodDisruptionBudget": "kubernetes:policy/v1:PodDisruptionBudget",
    "Service": "kubernetes:core/v1:Service",
    "ConfigMap": "kubernetes:core/v1:ConfigMap",
    "ServiceMonitor": "kubernetes:monitoring.coreos.com/v1:ServiceMonitor",
}


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


def _settled(resources: dict[str, pulumi.CustomResource]) -> pulumi.Output[list[str]]:
    return pulumi.Output.all(*[resource.urn for resource in resources.values()])


def _expected(config: InstallConfig) -> dict[tuple[str, str], dict[str, Any]]:
    return {(TYPES[o["kind"]], program.resource_name(o)): o for o in render(config)}


@pulumi.runtime.test
def test_every_object_of_the_install_is_declared_as_rendered(mocks: KubeMocks) -> Any:
    config = InstallConfig(
        watch_namespaces=["team-a", "team-b"],
        image="r/spotpool:9",
        monitoring={"serviceMonitor": True},
        notices={"enabled": True, "serviceType": "LoadBalancer"},
    )

    def check(_: object) -> None:
        assert mocks.declared == _expected(config)

    assert {key.rsplit("/", 1)[1] for key in program.RESOURCES} == set().union(*program.TIERS)
    resources = program.declare(config)
    assert sorted(resources) == sorted(identity(o) for o in render(config))
    return _settled(resources).apply(check)


@pulumi.runtime.test
def test_the_stack_config_sets_the_install(mocks: KubeMocks) -> Any:
    project = program.PROJECT
    pulumi.runtime.set_all_config(
        {
            f"{project}:image": "registry.example/spotpool:2",
            f"{project}:namespace": "ops",
            f"{project}:watchNamespaces": '["team-a"]',
            f"{project}:maxConcurrent": "12",
            f"{project}:refreshInterval": "2m",
            f"{project}:imagePullPolicy": "Always",
            f"{project}:createNamespace": "false",
            f"{project}:resources": '{"requests": {"cpu": "1"}, "limits": {"memory": "4Gi"}}',
            f"{project}:skipAwait": "true",
        }
    )
    expected = InstallConfig.model_validate(
        {
            "image": "registry.example/spotpool:2",
            "namespace": "ops",
            "watchNamespaces": ["team-a"],
            "maxConcurrent": 12,
            "refreshInterval": "2m",
            "imagePullPolicy": "Always",
            "createNamespace": False,
            "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "4Gi"}},
        }
    )
    assert program.config_from_pulumi(pulumi.Config()) == expected

    def check(_: object) -> None:
        want = _expected(expected)
        assert set(mocks.declared) == set(want)
        for key, inputs in mocks.declared.items():  # skipAwait: no kubelet, no waiting
            assert inputs["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
            assert {k: v for k, v in inputs.items() if k != "metadata"} == {
                k: v for k, v in want[key].items() if k != "metadata"
            }

    return _settled(program.main()).apply(check)
