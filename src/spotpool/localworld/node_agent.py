"""The node agent: what each emulated instance's join (cloud-init running kubeadm join or TKE's
bootstrap) and kubelet would do to the cluster, in one loop beside the emulator.

It reads the cloud only over HTTP, as anything outside the emulator does: the admin listing for
each instance's state, the signed DescribeInstancesAttributes for its user data. An instance
whose user data holds the line `# spotpool:join-node` registers a Node when it is RUNNING, named
after its id (lowercase), with TKE's provider id and the label the join recipes pass
(docs/nodes.md). KWOK plays the kubelet of every Node that carries MANAGED_LABEL (heartbeats,
pods Running, deleted pods gone after their grace); when the instance stops running the agent
takes the label off, so the heartbeats stop and the Node stays, as a dead kubelet leaves it.
"""

import base64
import json
import logging
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException
from tencentcloud.cvm.v20170312 import models

from spotpool.localworld.emulator import EmulatorProcess

JOIN_MARKER = "# spotpool:join-node"
INSTANCE_LABEL = "spotpool.io/instance-id"
# KWOK manages (heartbeats, runs the pods of) exactly the Nodes with this label.
MANAGED_LABEL = "spotpool.io/local-kubelet"
MANAGED_VALUE = "kwok"
KUBELET_VERSION = "v1.36.3"  # the local cluster's release (toolchain.manifest)
ATTRIBUTES_PAGE = 100  # DescribeInstancesAttributes' limit of ids a call

log = logging.getLogger(__name__)


def joins(user_data: str) -> bool:
    """Whether the instance's user data (decoded) runs the join."""
    return any(line.strip() == JOIN_MARKER for line in user_data.splitlines())


def node_name(instance_id: str) -> str:
    return instance_id.lower()


def provider_id(zone: str, instance_id: str) -> str:
    """TKE's form of a CVM's provider id."""
    return f"qcloud:///{zone}/{instance_id}"


def node_manifest(instance: dict[str, Any]) -> dict[str, Any]:
    """The Node a kubelet on `instance` (the emulator's admin view) registers."""
    instance_id, zone = instance["InstanceId"], instance["Zone"]
    name = node_name(instance_id)
    capacity = {
        "cpu": str(instance.get("CPU") or 2),
        "memory": f"{instance.get('Memory') or 4}Gi",
        "pods": "110",
    }
    addresses = [{"type": "Hostname", "address": name}]
    private = instance.get("PrivateIpAddresses") or []
    addresses += [{"type": "InternalIP", "address": ip} for ip in private]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": instance.get("InstanceType", ""),
                "topology.kubernetes.io/region": instance.get("Region", ""),
                "topology.kubernetes.io/zone": zone,
                INSTANCE_LABEL: instance_id,
                MANAGED_LABEL: MANAGED_VALUE,
            },
        },
        "spec": {"providerID": provider_id(zone, instance_id)},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "addresses": addresses,
            "nodeInfo": {
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "containerRuntimeVersion": "kwok",  # KWOK plays the kubelet
                "operatingSystem": "linux",
                "architecture": "amd64",
                "osImage": "",
                "kernelVersion": "",
                "machineID": "",
                "systemUUID": instance.get("Uuid") or "",
                "bootID": "",
            },
        },
    }


def running(instance: dict[str, Any]) -> bool:
    return instance.get("InstanceState") == "RUNNING" and not instance.get("Gone")


@dataclass
class NodeAgent:
    """One loop over the emulator's instances, every `interval` seconds, until `stop`."""

    emulator: EmulatorProcess
    kubeconfig: Path
    interval: float = 0.5
    log_file: Path | None = None  # what it did and what failed, a line each
    joining: dict[str, bool] = field(default_factory=dict)  # instance id -> user data joins
    registered: set[str] = field(default_factory=set)  # instance ids whose Node it made
    dead: set[str] = field(default_factory=set)  # registered, kubelet stopped
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        api = config.new_client_from_config(str(self.kubeconfig))  # type: ignore[no-untyped-call]
        self._core = client.CoreV1Api(api)
        self._thread = threading.Thread(target=self._loop, name="node-agent", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:  # one bad pass (an API server restart, a slow call) is retried
                log.exception("node agent pass failed")
                self._note("pass failed, retried:\n" + traceback.format_exc())
            self._stop.wait(self.interval)

    def step(self) -> None:
        """One pass: register the joined instances that run, stop the kubelets of those
        that no longer do (a stopped instance that runs again heartbeats again)."""
        instances = self.emulator.all_instances()
        unknown = [i for i in instances if running(i) and i["InstanceId"] not in self.joining]
        self._learn_user_data(unknown)
        for instance in instances:
            instance_id = instance["InstanceId"]
            if not self.joining.get(instance_id):
                continue
            if running(instance) and instance_id not in self.registered:
                self._register(instance)
            elif running(instance) and instance_id in self.dead:
                self._set_managed(instance_id, True)
            elif not running(instance) and instance_id in self.registered - self.dead:
                self._set_managed(instance_id, False)

    def _learn_user_data(self, instances: list[dict[str, Any]]) -> None:
        by_region: dict[str, list[str]] = {}
        for instance in instances:
            by_region.setdefault(instance["Region"], []).append(instance["InstanceId"])
        for region, ids in by_region.items():
            for start in range(0, len(ids), ATTRIBUTES_PAGE):
                batch = ids[start : start + ATTRIBUTES_PAGE]
                try:
                    self._ask_user_data(region, batch)
                except TencentCloudSDKException as error:
                    if error.get_code() != "InvalidInstanceId.NotFound":
                        raise  # asked again on the next pass
                    # One of them is gone, or another account's: each on its own.
                    for instance_id in batch:
                        self._ask_user_data(region, [instance_id], missing_joins=False)

    def _ask_user_data(self, region: str, ids: list[str], missing_joins: bool = True) -> None:
        request = models.DescribeInstancesAttributesRequest()
        request.from_json_string(json.dumps({"InstanceIds": ids, "Attributes": ["UserData"]}))
        try:
            reply = self.emulator.cvm(region=region).DescribeInstancesAttributes(request)
        except TencentCloudSDKException as error:
            if missing_joins or error.get_code() != "InvalidInstanceId.NotFound":
                raise
            self.joining[ids[0]] = False  # not ours to see: it never joins here
            return
        for item in reply.InstanceSet:
            data = base64.b64decode(item.Attributes.UserData or "").decode(errors="replace")
            self.joining[item.InstanceId] = joins(data)

    def _register(self, instance: dict[str, Any]) -> None:
        try:
            self._core.create_node(node_manifest(instance))  # type: ignore[arg-type]
        except ApiException as error:
            if error.status != 409:
                raise
            self._set_managed(instance["InstanceId"], True)  # left from an earlier life
        self.registered.add(instance["InstanceId"])
        self._note(f"registered {node_name(instance['InstanceId'])}")

    def _set_managed(self, instance_id: str, managed: bool) -> None:
        label = {MANAGED_LABEL: MANAGED_VALUE if managed else None}
        try:
            self._core.patch_node(node_name(instance_id), {"metadata": {"labels": label}})
        except ApiException as error:
            if error.status != 404:  # deleted (the operator's choice): nothing to heartbeat
                raise
        (self.dead.discard if managed else self.dead.add)(instance_id)
        self._note(f"{node_name(instance_id)}: kubelet {'started' if managed else 'stopped'}")

    def _note(self, text: str) -> None:
        if self.log_file is not None:
            with self.log_file.open("a") as out:
                out.write(f"{time.strftime('%H:%M:%S')} {text}\n")

    def delete_nodes(self) -> None:
        """Delete every Node this agent registered (a shared cluster's next world starts clean)."""
        for instance_id in self.registered:
            try:
                self._core.delete_node(node_name(instance_id))
            except ApiException as error:
                if error.status != 404:
                    raise
