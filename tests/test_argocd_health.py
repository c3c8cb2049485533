"""The Argo CD health check (operator/deploy/argocd/health.lua) run by a real Lua 5.1 (Argo CD's
gopher-lua speaks 5.1), without io, os or require as in Argo's sandbox, on statuses the
operator wrote: each sample comes from the reconciler (fake engine) going through a real flow,
not from hand-typed status."""

import contextlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from spotpool_operator.basics.failures import PoolProblem

from tests._support.argocd import SCRIPT, health
from tests.operator.fakes import World, make_world, pool_body, ref, run

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs" / "gitops.md"
KEY = "resource.customizations.health.devops.jokerbai.com_Spotpool"


def pool(body: dict[str, Any], status: dict[str, Any] | None) -> dict[str, Any]:
    """The object Argo CD sees: the manifest with the status the operator wrote last."""
    return {**body, "status": status} if status is not None else body


def converge(world: World, body: dict[str, Any]) -> dict[str, Any]:
    with contextlib.suppress(PoolProblem):
        run(world.reconciler.converge(ref(body)))
    return world.cluster.last("team-a/gpu")


def test_a_converged_pool_is_healthy(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    body = pool_body()
    status = converge(world, body)
    assert health(pool(body, status)) == (
        "Healthy",
        "Converged: 2 of 2 instances running",
    )


def test_a_pool_no_operator_saw_yet_and_one_being_created_progress(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    body = pool_body()
    assert health(body)[0] == "Progressing"
    converge(world, body)
    creating = world.cluster.statuses["team-a/gpu"][0]
    assert health(pool(body, creating)) == ("Progressing", "Converging: running up")


def test_a_new_generation_progresses_until_the_operator_acts_on_it(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    converge(world, pool_body())
    changed = pool_body(generation=2, replicas=4)
    before = world.cluster.last("team-a/gpu")  # the operator has not seen generation 2 yet
    assert health(pool(changed, before)) == (
        "Progressing",
        "Waiting for the operator to act on generation 2",
    )
    status = converge(world, changed)
    assert health(pool(changed, status)) == (
        "Healthy",
        "Converged: 4 of 4 instances running",
    )


@pytest.mark.parametrize(
    ("spec", "fail_up", "reason"),
    [
        ({"credentialsSecretRef": {"name": "nope"}}, None, "SecretNotFound"),
        ({"spotMaxPrice": "cheap"}, None, "InvalidSpec"),
        ({}, "code:LimitExceeded.SpotQuota the spot quota is used up", "QuotaExceeded"),
        ({}, "code:AuthFailure.SignatureFailure bad key", "AuthFailure"),
    ],
)
def test_what_needs_a_person_is_degraded(
    tmp_path: Path, spec: dict[str, Any], fail_up: str | None, reason: str
) -> None:
    world = make_world(tmp_path)
    world.cloud.fail_up = fail_up
    body = pool_body(**spec)
    state, message = health(pool(body, converge(world, body)))
    assert state == "Degraded" and message.startswith(f"{reason}: ")


def test_no_spot_stock_and_a_reclaim_progress(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.cloud.fail_up = "code:ResourceInsufficient.SpecifiedInstanceType sold out"
    body = pool_body()
    state, message = health(pool(body, converge(world, body)))
    assert state == "Progressing" and message.startswith("ResourceInsufficient: no spot stock")

    world.cloud.fail_up = None
    converge(world, body)
    world.cloud.reclaim("team-a.gpu", 0)
    run(world.reconciler.check_reclaims(ref(body)))
    writes = world.cluster.statuses["team-a/gpu"]
    reclaimed = next(w for w in writes if w.get("reclaims", {}).get("total"))
    assert health(pool(body, reclaimed)) == (
        "Progressing",
        "Reclaimed: 1 of 2 instances running: replacing",
    )
    assert health(pool(body, writes[-1]))[0] == "Healthy"  # replaced


def test_a_paused_pool_is_suspended_and_a_deleted_one_progresses(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    converge(world, pool_body())
    paused = pool_body(generation=2, paused=True)
    status = converge(world, paused)
    assert health(pool(paused, status))[0] == "Suspended"
    deleting = pool_body(generation=2)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert health(pool(deleting, status))[0] == "Progressing"


def test_a_status_from_before_the_kstatus_conditions_still_reads(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    body = pool_body()
    status = converge(world, body)
    old = {
        **status,
        "conditions": [
            c for c in status["conditions"] if c["type"] not in ("Reconciling", "Stalled")
        ],
    }
    assert health(pool(body, old))[0] == "Healthy"


def test_the_docs_ship_the_same_script_in_argocd_cm() -> None:
    text = DOCS.read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    config_maps = [
        doc
        for block in blocks
        for doc in yaml.safe_load_all(block)
        if isinstance(doc, dict) and doc.get("kind") == "ConfigMap"
    ]
    (argocd_cm,) = [cm for cm in config_maps if cm["metadata"]["name"] == "argocd-cm"]
    assert argocd_cm["data"][KEY] == SCRIPT.read_text()
    body = pool_body()
    assert health(body, argocd_cm["data"][KEY])[0] == "Progressing"
