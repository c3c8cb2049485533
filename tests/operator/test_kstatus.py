"""Reconciling and Stalled beside Ready, as kstatus (Flux, Argo CD, cli-utils) reads them.

Each case runs the reconciler (fake engine) through a real flow and reads the status it wrote;
`kstatus` below is cli-utils' generic rule for a custom resource (status.go,
checkGenericProperties): Terminating, then observedGeneration != generation → InProgress, then
Reconciling=True → InProgress, Stalled=True → Failed, else Current.
"""

from pathlib import Path
from typing import Any

import pytest
from spotpool_operator.basics.failures import PoolProblem

from tests.operator.fakes import World, make_world, pool_body, ref, run

pytestmark = pytest.mark.unit


def kstatus(body: dict[str, Any], status: dict[str, Any]) -> str:
    if body["metadata"].get("deletionTimestamp"):
        return "Terminating"
    observed = status.get("observedGeneration")
    if observed is not None and observed != body["metadata"]["generation"]:
        return "InProgress"
    for item in status.get("conditions") or []:
        if item["type"] == "Reconciling" and item["status"] == "True":
            return "InProgress"
        if item["type"] == "Stalled" and item["status"] == "True":
            return "Failed"
    return "Current"


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or []}


def converge(world: World, body: dict[str, Any]) -> PoolProblem | None:
    try:
        run(world.reconciler.converge(ref(body)))
    except PoolProblem as problem:
        return problem
    return None


def test_a_converge_is_reconciling_then_current(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    body = pool_body()
    assert converge(world, body) is None
    first, last = world.cluster.statuses["team-a/gpu"][0], world.cluster.last("team-a/gpu")
    assert conditions(first)["Reconciling"] == ("True", "Converging")
    assert conditions(first)["Stalled"][0] == "False"
    assert kstatus(body, first) == "InProgress"
    assert conditions(last)["Reconciling"] == ("False", "Converged")
    assert conditions(last)["Stalled"] == ("False", "Converged")
    assert conditions(last)["Ready"] == ("True", "Converged")
    assert last["observedGeneration"] == 1
    assert kstatus(body, last) == "Current"
    generations = {c["observedGeneration"] for c in last["conditions"]}
    assert generations == {1}


def test_a_new_generation_is_in_progress_until_its_up_ends(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    converge(world, pool_body())
    body = pool_body(generation=2, replicas=3)
    converge(world, body)
    writes = world.cluster.statuses["team-a/gpu"]
    during = writes[-2]
    assert during["observedGeneration"] == 1 and kstatus(body, during) == "InProgress"
    assert kstatus(body, writes[-1]) == "Current" and writes[-1]["size"] == 3


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (pool_body(credentialsSecretRef={"name": "nope"}), "SecretNotFound"),
        (pool_body(minimum=1, maximum=2, replicas=2, spotMaxPrice="cheap"), "InvalidSpec"),
    ],
)
def test_what_needs_a_person_stalls(tmp_path: Path, body: dict[str, Any], reason: str) -> None:
    world = make_world(tmp_path)
    problem = converge(world, body)
    assert problem is not None and problem.reason == reason
    status = world.cluster.last("team-a/gpu")
    assert conditions(status)["Stalled"] == ("True", reason)
    assert conditions(status)["Reconciling"] == ("False", reason)
    assert conditions(status)["Ready"][0] == "False"
    assert status["observedGeneration"] == 1
    assert kstatus(body, status) == "Failed"


def test_a_quota_error_stalls_and_no_stock_is_retried(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.cloud.fail_up = "[TencentCloudSDKException] code:LimitExceeded.SpotQuota quota used up"
    body = pool_body()
    assert converge(world, body) is not None
    status = world.cluster.last("team-a/gpu")
    assert conditions(status)["Stalled"] == ("True", "QuotaExceeded")
    assert kstatus(body, status) == "Failed"

    # The retry of the same spec stays Stalled while it runs (no flapping), and clears it.
    world.cloud.fail_up = None
    assert converge(world, body) is None
    retry, done = world.cluster.statuses["team-a/gpu"][-2:]
    assert conditions(retry)["Stalled"] == ("True", "QuotaExceeded")
    assert conditions(done)["Stalled"][0] == "False" and kstatus(body, done) == "Current"

    world.cloud.fail_up = "code:ResourceInsufficient.SpecifiedInstanceType no stock"
    changed = pool_body(generation=2, replicas=4)
    assert converge(world, changed) is not None
    status = world.cluster.last("team-a/gpu")
    assert conditions(status)["Stalled"][0] == "False"
    assert conditions(status)["Reconciling"] == ("True", "ResourceInsufficient")
    assert kstatus(changed, status) == "InProgress"


def test_a_stalling_spec_reverted_to_the_applied_one_is_current(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    converge(world, pool_body())
    bad = pool_body(generation=2, spotMaxPrice="cheap")
    assert converge(world, bad) is not None
    assert kstatus(bad, world.cluster.last("team-a/gpu")) == "Failed"
    fixed = pool_body(generation=3)
    assert converge(world, fixed) is None
    status = world.cluster.last("team-a/gpu")
    assert world.cloud.calls == [("up", "team-a.gpu")]  # nothing to run: it is applied
    assert conditions(status)["Ready"] == ("True", "Converged")
    assert conditions(status)["Degraded"][0] == "False"
    assert status["phase"] == "Ready" and kstatus(fixed, status) == "Current"


def test_a_reclaim_is_reconciling_until_replaced(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    body = pool_body()
    converge(world, body)
    world.cloud.reclaim("team-a.gpu", 1)
    pool = world.reconciler.pool(ref(body))
    run(world.reconciler.check_reclaims(ref(body)))
    writes = world.cluster.statuses["team-a/gpu"]
    reclaimed = next(w for w in writes if conditions(w).get("Ready", ("", ""))[1] == "Reclaimed")
    assert conditions(reclaimed)["Reconciling"] == ("True", "Reclaimed")
    assert kstatus(body, reclaimed) == "InProgress"
    assert pool.status.ready_replicas == 2 and kstatus(body, writes[-1]) == "Current"


def test_a_paused_pool_is_current_and_not_reconciling(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    converge(world, pool_body())
    body = pool_body(generation=2, paused=True)
    converge(world, body)
    status = world.cluster.last("team-a/gpu")
    assert status["phase"] == "Paused"
    assert conditions(status)["Reconciling"][0] == "False"
    assert kstatus(body, status) == "Current"
