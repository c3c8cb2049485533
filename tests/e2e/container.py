"""A Deployment's pod run by podman the way a kubelet would run it, for a cluster without one.

From the rendered Deployment: the container's image, command and args, env (values, fieldRef,
secretKeyRef, envFrom Secrets), user and group (pod and container securityContext), read-only
root filesystem, dropped capabilities, no privilege escalation, and its volume mounts (emptyDir:
a fresh world-writable directory; secret: the Secret's keys read from the API server, owned by
fsGroup; persistentVolumeClaim: a directory owned by fsGroup). The in-cluster identity as a
kubelet gives it: a TokenRequest token of the pod's service account, the cluster's CA and the
namespace mounted at /var/run/secrets/kubernetes.io/serviceaccount, KUBERNETES_SERVICE_HOST and
_PORT naming the API server. The network is the host's (127.0.0.1: the API server and the
emulator), so each container port moves to a free one — as a pod's own network namespace would
keep them apart — with the env values naming it.
"""

import base64
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from spotpool.image.host import RUN_FLAGS
from spotpool.localworld.kube import Kube
from spotpool.ports import free_port

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass
class Pod:
    """What `podman run` needs, and what the test reads back."""

    name: str
    image: str
    grace_seconds: int
    ports: dict[str, int]  # container port name -> host port
    env: dict[str, str] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    entrypoint: list[str] | None = None
    args: list[str] = field(default_factory=list)

    def run_command(self) -> list[str]:
        command = ["podman", "run", "--detach", "--name", self.name, *self.flags]
        for name, value in self.env.items():
            command += ["--env", f"{name}={value}"]
        if self.entrypoint is not None:
            command += ["--entrypoint", json.dumps(self.entrypoint)]
        return [*command, self.image, *self.args]


def _secret(kube: Kube, namespace: str, name: str) -> dict[str, bytes]:
    found = json.loads(kube.ok("-n", namespace, "get", "secret", name, "-o", "json"))
    return {key: base64.b64decode(value) for key, value in (found.get("data") or {}).items()}


def _field(path: str, pod: dict[str, str]) -> str:
    known = {
        "metadata.name": pod["name"],
        "metadata.namespace": pod["namespace"],
        "metadata.uid": pod["uid"],
        "spec.nodeName": "local",
        "spec.serviceAccountName": pod["serviceAccount"],
        "status.podIP": "127.0.0.1",
        "status.hostIP": "127.0.0.1",
    }
    if path not in known:
        raise AssertionError(f"fieldRef {path}: this kubelet stand-in does not know it")
    return known[path]


def _security(spec: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """The container's securityContext over the pod's (as the kubelet merges them)."""
    pod_level = spec.get("securityContext") or {}
    merged = {k: v for k, v in pod_level.items() if k in ("runAsUser", "runAsGroup")}
    merged.update(container.get("securityContext") or {})
    merged["fsGroup"] = pod_level.get("fsGroup")
    merged["supplementalGroups"] = pod_level.get("supplementalGroups") or []
    return merged


def _service_account(kube: Kube, namespace: str, account: str, into: Path) -> None:
    into.mkdir(parents=True)
    token = kube.ok("-n", namespace, "create", "token", account, "--duration=1h").strip()
    config = yaml.safe_load(kube.kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    if "certificate-authority-data" in cluster:
        ca = base64.b64decode(cluster["certificate-authority-data"])
    else:
        ca = Path(cluster["certificate-authority"]).read_bytes()
    for name, content in (
        ("token", token.encode()),
        ("ca.crt", ca),
        ("namespace", namespace.encode()),
    ):
        (into / name).write_bytes(content)
        (into / name).chmod(0o644)


def _volume_dir(
    kube: Kube, namespace: str, volume: dict[str, Any], into: Path, fs_group: int | None
) -> Path:
    into.mkdir(parents=True)
    if "emptyDir" in volume:
        into.chmod(0o777)  # the kubelet's emptyDir mode
        return into
    if "persistentVolumeClaim" in volume:
        if fs_group is not None:
            os.chown(into, 0, fs_group)
        into.chmod(0o2775)  # fsGroup: group-owned, group-writable, setgid
        return into
    if "secret" in volume:
        source = volume["secret"]
        data = _secret(kube, namespace, source["secretName"])
        items = source.get("items") or [{"key": k, "path": k} for k in data]
        for item in items:
            path = into / item["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data[item["key"]])
            if fs_group is not None:
                os.chown(path, 0, fs_group)
            path.chmod(item.get("mode", source.get("defaultMode", 0o644)))
        return into
    raise AssertionError(f"volume {volume['name']}: this kubelet stand-in does not know its kind")


def pod_from_deployment(
    kube: Kube, deployment: dict[str, Any], directory: Path, pod_name: str
) -> Pod:
    """The Deployment's one container as a Pod to `podman run` (files under `directory`)."""
    namespace = deployment["metadata"]["namespace"]
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    account = spec.get("serviceAccountName", "default")
    ports = {
        p.get("name", str(p["containerPort"])): free_port() for p in container.get("ports", [])
    }
    moved = {
        str(p["containerPort"]): str(ports[p.get("name", str(p["containerPort"]))])
        for p in container.get("ports", [])
    }
    identity = {
        "name": pod_name,
        "namespace": namespace,
        "uid": pod_name,
        "serviceAccount": account,
    }

    env: dict[str, str] = {}
    server = urlsplit(
        yaml.safe_load(kube.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    )
    env["KUBERNETES_SERVICE_HOST"] = server.hostname or "127.0.0.1"
    env["KUBERNETES_SERVICE_PORT"] = str(server.port or 443)
    for source in container.get("envFrom") or []:
        if "secretRef" in source:
            for key, data in _secret(kube, namespace, source["secretRef"]["name"]).items():
                env[source.get("prefix", "") + key] = data.decode()
    for item in container.get("env") or []:
        if "value" in item:
            value = str(item["value"])
            env[item["name"]] = moved.get(value, value) if item["name"].endswith("_PORT") else value
        elif "fieldRef" in item["valueFrom"]:
            env[item["name"]] = _field(item["valueFrom"]["fieldRef"]["fieldPath"], identity)
        elif "secretKeyRef" in item["valueFrom"]:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = _secret(kube, namespace, ref["name"])[ref["key"]].decode()
        else:
            raise AssertionError(f"env {item['name']}: this kubelet stand-in cannot fill it")

    security = _security(spec, container)
    flags = ["--network", "host", *RUN_FLAGS, "--hostname", pod_name]
    if "runAsUser" in security:
        flags += ["--user", f"{security['runAsUser']}:{security.get('runAsGroup', 0)}"]
    for group in [security["fsGroup"], *security["supplementalGroups"]]:
        if group is not None:
            flags += ["--group-add", str(group)]
    if security.get("readOnlyRootFilesystem"):
        flags += ["--read-only", "--read-only-tmpfs=false"]  # no tmpfs a pod would not have
    if "ALL" in (security.get("capabilities") or {}).get("drop", []):
        flags += ["--cap-drop", "ALL"]
    if security.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]

    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        host = _volume_dir(kube, namespace, volume, directory / "volumes" / mount["name"],
                           security["fsGroup"])  # fmt: skip
        readonly = mount.get("readOnly") or "secret" in volume
        flags += ["--volume", f"{host}:{mount['mountPath']}:{'ro' if readonly else 'rw'}"]
    if spec.get("automountServiceAccountToken", True):
        _service_account(kube, namespace, account, directory / "serviceaccount")
        flags += ["--volume", f"{directory / 'serviceaccount'}:{SERVICE_ACCOUNT_DIR}:ro"]

    return Pod(
        name=pod_name,
        image=container["image"],
        grace_seconds=int(spec.get("terminationGracePeriodSeconds", 30)),
        ports=ports,
        env=env,
        flags=flags,
        entrypoint=container.get("command"),
        args=list(container.get("args") or []),
    )


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)


def podman_ok(*args: str, timeout: float = 120) -> str:
    done = podman(*args, timeout=timeout)
    assert done.returncode == 0, f"podman {' '.join(args)}: {done.stderr}{done.stdout}"
    return done.stdout
