"""Helpers for the install tests: a fresh cluster, the rendered objects, checks on them.

The local cluster runs kube-controller-manager, so deleting an install goes as in any cluster:
the namespace controller empties and finalizes a Terminating namespace, the PVC-protection
controller releases the claim, the garbage collector removes what a foreground deletion owns.
"""

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from spotpool.localworld.kube import Kube

ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "operator" / "deploy"
KUSTOMIZE = DEPLOY / "kustomize"


def render(out: Path, *flags: str) -> Path:
    """`python -m spotpool_deploy render` (the chart for kubectl) as a user runs it, into `out`."""
    subprocess.run(
        [sys.executable, "-m", "spotpool_deploy", "render", "--out", str(out), *flags],
        cwd=DEPLOY,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out


def objects(directory: Path) -> list[dict[str, Any]]:
    """The objects a kustomization lists, in its order."""
    listed = yaml.safe_load((directory / "kustomization.yaml").read_text())["resources"]
    return [yaml.safe_load((directory / name).read_text()) for name in listed]


def _args(obj: dict[str, Any]) -> list[str]:
    kind = obj["kind"].lower()
    group = obj["apiVersion"].rsplit("/", 1)[0] if "/" in obj["apiVersion"] else ""
    resource = f"{kind}.{group}" if group else kind
    meta = obj["metadata"]
    namespace = ["-n", meta["namespace"]] if "namespace" in meta else []
    return [*namespace, resource, meta["name"]]


def live(kube: Kube, obj: dict[str, Any]) -> dict[str, Any] | None:
    result = kube.run("get", *_args(obj), "-o", "json")
    if result.returncode != 0:
        assert "NotFound" in result.stderr, result.stderr
        return None
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def differences(want: Any, have: Any, path: str = "") -> list[str]:
    """Where `have` (as stored, with the server's defaults added) does not hold `want`."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return [f"{path}: {have!r} is not an object"]
        return [d for k, v in want.items() for d in differences(v, have.get(k), f"{path}.{k}")]
    if isinstance(want, list):
        if not isinstance(have, list) or len(have) != len(want):
            return [f"{path}: {have!r} is not {want!r}"]
        return [d for i, (w, h) in enumerate(zip(want, have, strict=True))
                for d in differences(w, h, f"{path}[{i}]")]  # fmt: skip
    return [] if want == have else [f"{path}: {have!r} != {want!r}"]


def assert_installed(kube: Kube, wanted: list[dict[str, Any]]) -> None:
    for obj in wanted:
        have = live(kube, obj)
        assert have is not None, f"{' '.join(_args(obj))} does not exist"
        problems = differences({k: v for k, v in obj.items() if k != "status"}, have)
        assert not problems, f"{' '.join(_args(obj))}: {problems}"


def wait_gone(kube: Kube, wanted: list[dict[str, Any]], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    left = wanted
    while left and time.monotonic() < deadline:
        left = [obj for obj in left if live(kube, obj) is not None]
        time.sleep(0.3)
    assert not left, f"still there: {[' '.join(_args(obj)) for obj in left]}"


def can(kube: Kube, account: str, verb: str, resource: str, *where: str) -> bool:
    """`kubectl auth can-i VERB RESOURCE WHERE… --as=ACCOUNT`: yes (0) or no (1)."""
    result = kube.run("auth", "can-i", verb, resource, *where, f"--as={account}")
    assert result.returncode in (0, 1), result.stderr
    return result.returncode == 0


def granted(kube: Kube, account: str, namespace: str) -> set[tuple[str, str]]:
    """(resource, verbs) rows of `kubectl auth can-i --list`, less what every user may do."""
    table = kube.ok("auth", "can-i", "--list", "-n", namespace, f"--as={account}")
    rows = set()
    for line in table.splitlines()[1:]:
        if not line.strip() or line[0].isspace():  # a non-resource URL (discovery): everyone's
            continue
        resource, rest = line.split(None, 1)
        verbs = rest.rsplit("[", 1)[-1].rstrip("] ").strip()
        if not resource.startswith("self"):  # self*reviews: everyone's too
            rows.add((resource, verbs))
    return rows


def kubeconfig_for(kube: Kube, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the service account (a TokenRequest token)."""
    token = kube.ok("-n", namespace, "create", "token", account, "--duration=1h").strip()
    admin = yaml.safe_load(kube.kubeconfig.read_text())
    admin["users"] = [{"name": account, "user": {"token": token}}]
    admin["contexts"][0]["context"]["user"] = account
    path.write_text(yaml.safe_dump(admin))
    path.chmod(0o600)
    return path
