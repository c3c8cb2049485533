"""`spotpool cluster up/down`: a real kube-apiserver and etcd on loopback."""

import json
import os
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from spotpool.cluster.local import load_state
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
    for tool in ("etcd", "kube-apiserver"):
        require_tool(tool)
    kubectl = str(require_tool("kubectl"))
    spotpool = Path(os.environ.get("VIRTUAL_ENV", ".venv")) / "bin" / "spotpool"
    directory = tmp_path / "cluster"
    subprocess.run([str(spotpool), "cluster", "up", "--dir", str(directory)], check=True)
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
    finally:
        subprocess.run([str(spotpool), "cluster", "down", "--dir", str(directory)], check=True)
    assert not _pid_alive(state.etcd_pid)
    assert not _pid_alive(state.apiserver_pid)
    assert not (directory / "cluster.json").exists()
