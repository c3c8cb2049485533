"""kstatus conditions and the Argo CD health check on a real pool: the operator process writes
the status through the real kube-apiserver, `kubectl get` shows its printer columns, and the
Lua check (tests/test_argocd_health.py runs it) reads the object as Argo CD would."""

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from spotpool.localworld.kube import Kube
from tests._support.argocd import health
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld, pool_manifest, secret_manifest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    with operator_world(kube, tmp_path_factory.mktemp("gitops"), namespace_prefix="gh-") as world:
        yield world


def _conditions(pool: dict[str, Any]) -> dict[str, tuple[str, str]]:
    items = (pool.get("status") or {}).get("conditions") or []
    return {c["type"]: (c["status"], c["reason"]) for c in items}


def _cell(world: OperatorWorld, ns: str, name: str, column: str) -> str:
    header, *rows = world.kube.ok("-n", ns, "get", "spotpools").splitlines()
    at = header.index(column)
    (row,) = [r for r in rows if r.startswith(f"{name} ")]
    return row[at:].split()[0] if row[at:].strip() else ""


def test_a_missing_secret_stalls_and_creating_it_makes_the_pool_healthy(
    world: OperatorWorld,
) -> None:
    ns = world.namespace()
    world.apply(ns, pool_manifest("later", replicas=1, credentialsSecretRef={"name": "later"}))

    def stalled() -> dict[str, Any] | None:
        pool = world.get(ns, "later") or {}
        return pool if _conditions(pool).get("Stalled", ("", ""))[0] == "True" else None

    pool = world.wait_until(stalled, "the pool Stalled", timeout=60)
    assert _conditions(pool)["Stalled"] == ("True", "SecretNotFound")
    assert _conditions(pool)["Reconciling"][0] == "False"
    assert pool["status"]["observedGeneration"] == pool["metadata"]["generation"]
    state, message = health(pool)
    assert state == "Degraded" and message.startswith("SecretNotFound: ")
    assert _cell(world, ns, "later", "REASON") == "SecretNotFound"

    started = time.monotonic()
    world.kube.ok("-n", ns, "apply", "-f", "-", stdin=json.dumps(secret_manifest("later")))
    pool = world.wait_ready(ns, "later", 1, timeout=180)
    print(f"healthy {time.monotonic() - started:.0f} s after the Secret appeared")
    assert _conditions(pool)["Stalled"][0] == "False"
    assert _conditions(pool)["Reconciling"][0] == "False"
    assert health(pool) == ("Healthy", "Converged: 1 of 1 instances running")
    assert _cell(world, ns, "later", "REASON") == "Converged"
    world.kube.ok("-n", ns, "wait", "--for=condition=Ready", "spotpool/later", "--timeout=5s")

    # A scale: Progressing (new generation, then Reconciling) until Healthy again.
    patch = json.dumps({"spec": {"replicas": 2}})
    world.kube.ok("-n", ns, "patch", "spotpool", "later", "--type=merge", "-p", patch)
    seen = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        pool = world.get(ns, "later") or {}
        seen.append(health(pool))
        if seen[-1][0] == "Healthy" and pool["status"]["readyReplicas"] == 2:
            break
        time.sleep(0.2)
    states = [state for state, _ in seen]
    assert states[-1] == "Healthy" and "Progressing" in states, seen
    assert "Degraded" not in states, seen
    assert pool["status"]["observedGeneration"] == pool["metadata"]["generation"] == 2
