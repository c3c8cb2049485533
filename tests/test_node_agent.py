"""The node agent's decisions (localworld/node_agent.py), on a fake cloud and a fake API server:
who joins, what Node a joined instance registers, when its kubelet stops and starts again, and
that a deleted Node is never registered again (a running kubelet does not)."""

import base64
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException

from spotpool.localworld.node_agent import (
    INSTANCE_LABEL,
    JOIN_MARKER,
    MANAGED_LABEL,
    NodeAgent,
    joins,
    node_manifest,
)

pytestmark = pytest.mark.unit


def _instance(instance_id: str, state: str = "RUNNING", gone: bool = False) -> dict[str, Any]:
    return {
        "InstanceId": instance_id, "InstanceState": state, "Gone": gone, "Zone": "ap-singapore-2",
        "Region": "ap-singapore", "InstanceType": "GN7.2XLARGE32", "CPU": 8, "Memory": 32,
        "PrivateIpAddresses": ["172.16.0.9"], "Uuid": "u-1",
    }  # fmt: skip


@dataclass
class FakeCloud:
    instances: list[dict[str, Any]]
    user_data: dict[str, str]
    asked: list[list[str]] = field(default_factory=list)
    foreign: set[str] = field(default_factory=set)  # another account's: NotFound to our keys

    def all_instances(self) -> list[dict[str, Any]]:
        return self.instances

    def cvm(self, region: str) -> Any:
        def describe(request: Any) -> Any:
            self.asked.append(request.InstanceIds)
            if self.foreign & set(request.InstanceIds):
                raise TencentCloudSDKException("InvalidInstanceId.NotFound", "not found")
            return SimpleNamespace(InstanceSet=[
                SimpleNamespace(InstanceId=i, Attributes=SimpleNamespace(
                    UserData=base64.b64encode(self.user_data[i].encode()).decode()))
                for i in request.InstanceIds
            ])  # fmt: skip

        return SimpleNamespace(DescribeInstancesAttributes=describe)


@dataclass
class FakeCore:
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def create_node(self, body: dict[str, Any]) -> None:
        if body["metadata"]["name"] in self.nodes:
            raise ApiException(status=409)
        self.nodes[body["metadata"]["name"]] = body

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        if name not in self.nodes:
            raise ApiException(status=404)
        labels = self.nodes[name]["metadata"]["labels"]
        for key, value in body["metadata"]["labels"].items():
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value


def _agent(cloud: FakeCloud, core: FakeCore) -> NodeAgent:
    agent = NodeAgent(cloud, Path("unused"))  # type: ignore[arg-type]
    agent._core = core  # type: ignore[assignment]
    return agent


def test_the_join_line_is_a_whole_line() -> None:
    assert joins(f"#!/bin/sh\n{JOIN_MARKER}\nkubeadm join ...\n")
    assert joins(f"  {JOIN_MARKER}  ")
    assert not joins(f"echo '{JOIN_MARKER}'")
    assert not joins("#!/bin/sh\n")


def test_a_joined_instance_registers_as_tke_names_it() -> None:
    node = node_manifest(_instance("ins-AbC123"))
    assert node["metadata"]["name"] == "ins-abc123"
    assert node["spec"]["providerID"] == "qcloud:///ap-singapore-2/ins-AbC123"
    labels = node["metadata"]["labels"]
    assert labels[INSTANCE_LABEL] == "ins-AbC123"
    assert labels["topology.kubernetes.io/zone"] == "ap-singapore-2"
    assert labels[MANAGED_LABEL] == "kwok"
    assert node["status"]["capacity"] == {"cpu": "8", "memory": "32Gi", "pods": "110"}
    assert {"type": "InternalIP", "address": "172.16.0.9"} in node["status"]["addresses"]


def test_the_kubelet_stops_with_its_instance_and_a_deleted_node_stays_deleted() -> None:
    joined, plain, booting = _instance("ins-a"), _instance("ins-b"), _instance("ins-c", "PENDING")
    cloud = FakeCloud([joined, plain, booting],
                      {"ins-a": JOIN_MARKER, "ins-b": "echo", "ins-c": JOIN_MARKER})  # fmt: skip
    core = FakeCore()
    agent = _agent(cloud, core)

    agent.step()
    agent.step()
    assert set(core.nodes) == {"ins-a"}  # not the plain one, not yet the booting one
    assert cloud.asked == [["ins-a", "ins-b"]]  # user data read once per instance

    joined["InstanceState"] = "STOPPED"  # a stop: the kubelet's heartbeats end, the Node stays
    agent.step()
    assert MANAGED_LABEL not in core.nodes["ins-a"]["metadata"]["labels"]
    joined["InstanceState"] = "RUNNING"  # started again: heartbeats again
    agent.step()
    assert core.nodes["ins-a"]["metadata"]["labels"][MANAGED_LABEL] == "kwok"

    booting["InstanceState"] = "RUNNING"
    agent.step()
    assert set(core.nodes) == {"ins-a", "ins-c"}

    del core.nodes["ins-c"]  # the operator deleted it; the instance runs on
    agent.step()
    assert "ins-c" not in core.nodes
    joined.update(Gone=True, InstanceState="SHUTDOWN")  # reclaimed
    agent.step()
    assert MANAGED_LABEL not in core.nodes["ins-a"]["metadata"]["labels"]


def test_another_accounts_instance_does_not_hold_the_others_back() -> None:
    cloud = FakeCloud([_instance("ins-a"), _instance("ins-x")],
                      {"ins-a": JOIN_MARKER, "ins-x": JOIN_MARKER}, foreign={"ins-x"})  # fmt: skip
    core = FakeCore()
    agent = _agent(cloud, core)
    agent.step()
    agent.step()
    assert set(core.nodes) == {"ins-a"}
    assert agent.joining == {"ins-a": True, "ins-x": False}
    assert cloud.asked == [["ins-a", "ins-x"], ["ins-a"], ["ins-x"]]  # then never again
