"""`spotpool cluster up/down`: a real kube-apiserver and etcd on loopback."""

import base64
import json
import os
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from spotpool.cluster.local import load_state
from spotpool.localworld.emulator import wait_until
from spotpool.localworld.kube import Kube
from tests.conftest import require_tool

pytestmark = pytest.mark.e2e

WIDGET_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.spotpool.dev}
spec:
  group: example.spotpool.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, minimum: 1}
"""

WIDGET = """
apiVersion: example.spotpool.dev/v1
kind: Widget
metadata: {name: w1, namespace: default}
spec: {size: 3}
"""


def _pid_alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text()


def test_cluster_serves_a_crd_round_trip_and_down_leaves_nothing(tmp_path: Path) -> None:
    for tool in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        require_tool(tool)
    kubectl = str(require_tool("kubectl"))
    spotpool = Path(os.environ.get("VIRTUAL_ENV", ".venv")) / "bin" / "spotpool"
    directory = tmp_path / "cluster"
    up = [str(spotpool), "cluster", "up", "--dir", str(directory), "--scheduler"]
    subprocess.run(up, check=True)
    state = load_state(directory)
    try:
        env = {**os.environ, "KUBECONFIG": str(state.kubeconfig)}

        def kc(*args: str, stdin: str | None = None) -> str:
            return subprocess.run(
                [kubectl, *args], input=stdin, env=env, check=True, capture_output=True, text=True
            ).stdout

        kc("apply", "-f", "-", stdin=WIDGET_CRD)
        kc("wait", "--for=condition=Established", "crd/widgets.example.spotpool.dev")
        kc("apply", "-f", "-", stdin=WIDGET)
        got = json.loads(kc("get", "widget", "w1", "-o", "json"))
        assert got["spec"] == {"size": 3}

        # The schema is enforced by the real API server.
        bad = subprocess.run(
            [kubectl, "apply", "-f", "-"],
            input=WIDGET.replace("3", "0"),
            env=env,
            capture_output=True,
            text=True,
        )
        assert bad.returncode != 0 and "spec.size" in bad.stderr

        # No anonymous access.
        context = ssl.create_default_context(cafile=str(directory / "pki" / "apiserver.crt"))
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{state.server}/api", context=context, timeout=5)
        assert refused.value.code == 401

        # --scheduler: kube-scheduler runs under its own identity and looks at every pod.
        assert state.scheduler_pid and _pid_alive(state.scheduler_pid)
        kc("run", "waiting", "--image=none", "--restart=Never")

        def unschedulable() -> bool:
            pod = json.loads(kc("get", "pod", "waiting", "-o", "json"))
            conditions = pod["status"].get("conditions") or []
            return any(c.get("reason") == "Unschedulable" for c in conditions)

        wait_until(unschedulable, "the scheduler's verdict on a cluster without nodes", 30, 0.3)
    finally:
        subprocess.run([str(spotpool), "cluster", "down", "--dir", str(directory)], check=True)
    assert not _pid_alive(state.etcd_pid)
    assert not _pid_alive(state.apiserver_pid)
    assert state.controller_manager_pid and not _pid_alive(state.controller_manager_pid)
    assert not _pid_alive(state.scheduler_pid)
    assert not (directory / "cluster.json").exists()


OWNER_AND_DEPENDENT = """
apiVersion: v1
kind: ConfigMap
metadata: {name: owner, namespace: kcm-check}
---
apiVersion: v1
kind: Secret
metadata:
  name: legacy-token
  namespace: kcm-check
  annotations: {kubernetes.io/service-account.name: default}
type: kubernetes.io/service-account-token
"""


def test_the_controller_manager_runs_namespaces_garbage_collection_and_tokens(
    kube: Kube,
) -> None:
    """What kube-controller-manager does in any cluster happens here too: a new namespace
    gets its `default` service account and root CA; a legacy token Secret is filled with a
    token that authenticates; an owned object goes with its owner; a deleted namespace is
    emptied and removed."""
    kube.ok("create", "namespace", "kcm-check")

    def exists(*what: str) -> bool:
        return kube.run("-n", "kcm-check", "get", *what).returncode == 0

    wait_until(lambda: exists("serviceaccount", "default"), "the default account", 60, 0.5)
    wait_until(lambda: exists("configmap", "kube-root-ca.crt"), "the root CA", 60, 0.5)
    kube.ok("apply", "-f", "-", stdin=OWNER_AND_DEPENDENT)
    owner_uid = kube.ok(
        "-n", "kcm-check", "get", "configmap", "owner", "-o", "jsonpath={.metadata.uid}"
    )
    dependent = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "dependent",
            "namespace": "kcm-check",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid}
            ],
        },
    }
    kube.ok("apply", "-f", "-", stdin=json.dumps(dependent))

    def token() -> str:
        found = kube.ok(
            "-n", "kcm-check", "get", "secret/legacy-token", "-o=jsonpath={.data.token}"
        )
        return base64.b64decode(found).decode() if found else ""

    account_token = wait_until(token, "the token", timeout=60, every=0.5)
    who = kube.ok("auth", "whoami", "-o", "json", f"--token={account_token}")
    assert (
        json.loads(who)["status"]["userInfo"]["username"]
        == "system:serviceaccount:kcm-check:default"
    )

    kube.ok("-n", "kcm-check", "delete", "configmap", "owner", "--cascade=foreground")
    wait_until(lambda: not exists("configmap", "dependent"), "the garbage collector", 60, 0.5)
    kube.ok("delete", "namespace", "kcm-check", "--timeout=90s")  # waits until it is gone
    assert "NotFound" in kube.run("get", "namespace", "kcm-check").stderr
