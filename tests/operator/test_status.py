"""Status rendering: the article's fields, ours, conditions and the merge patch."""

from datetime import UTC, datetime, timedelta

import pytest
from spotpool_operator.reporting import status as render

from spotpool.api.status import Phase, SpotpoolStatus
from spotpool.engine.basics.results import OperationKind, OperationResult, SlotOutput

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def _result(*states: str, gone: list[int] | None = None) -> OperationResult:
    return OperationResult(
        kind=OperationKind.REFRESH if gone is not None else OperationKind.UP,
        stack="team-a.gpu",
        seconds=3.0,
        gone_slots=gone or [],
        instances=[
            SlotOutput(slot=i, instance_id=f"ins-{i}", public_ip=f"203.0.113.{i}", state=s)
            for i, s in enumerate(states)
        ],
    )


def _base(desired: int = 2) -> SpotpoolStatus:
    return render.identity(SpotpoolStatus(), "gpu", "team-a.gpu", "file:///state", desired)


def test_converged_fills_the_article_fields_and_ours() -> None:
    status = render.converged(_base(), _result("RUNNING", "RUNNING"), 3, T0, T1)
    patch = render.to_patch(status)

    assert patch["size"] == 2
    assert [(i["instanceId"], i["publicIp"]) for i in patch["instances"]] == [
        ("ins-0", "203.0.113.0"),
        ("ins-1", "203.0.113.1"),
    ]
    assert patch["replicas"] == 2 and patch["readyReplicas"] == 2
    assert patch["observedGeneration"] == 3
    assert patch["phase"] == "Ready"
    assert patch["selector"] == "spotpool.devops.jokerbai.com/pool=gpu"
    assert patch["stack"]["name"] == "team-a.gpu"
    assert patch["stack"]["lastOperation"]["kind"] == "up"
    assert patch["stack"]["lastOperation"]["result"] == "succeeded"
    conditions = {c["type"]: c for c in patch["conditions"]}
    assert conditions["Ready"]["status"] == "True"
    assert conditions["Ready"]["reason"] == "Converged"
    assert conditions["Progressing"]["status"] == "False"
    assert conditions["Degraded"]["status"] == "False"
    assert conditions["Ready"]["observedGeneration"] == 3


def test_instances_not_running_yet_are_not_ready() -> None:
    status = render.converged(_base(), _result("RUNNING", "PENDING"), 1, T0, T1)
    assert status.ready_replicas == 1 and status.size == 2
    assert status.phase == Phase.CONVERGING
    ready = render.condition(status, render.READY)
    assert ready is not None and ready.status == "False"


def test_transition_time_moves_only_when_the_condition_flips() -> None:
    first = render.converged(_base(), _result("RUNNING", "RUNNING"), 1, T0, T0)
    again = render.converged(first, _result("RUNNING", "RUNNING"), 2, T1, T1)
    ready = render.condition(again, render.READY)
    assert ready is not None and ready.last_transition_time == T0

    failed = render.failed(again, "up", "ResourceInsufficient", "no stock", 3, T1, T1)
    ready = render.condition(failed, render.READY)
    degraded = render.condition(failed, render.DEGRADED)
    assert ready is not None and ready.status == "False" and ready.last_transition_time == T1
    assert degraded is not None and degraded.reason == "ResourceInsufficient"
    assert failed.phase == Phase.DEGRADED
    assert failed.stack is not None and failed.stack.last_operation is not None
    assert failed.stack.last_operation.result == "failed"


def test_refresh_with_reclaims_drops_the_slots_and_counts_them() -> None:
    status = render.converged(_base(3), _result("RUNNING", "RUNNING", "RUNNING"), 1, T0, T0)
    refreshed = render.refreshed(status, _result("RUNNING", "RUNNING", "RUNNING", gone=[1]), T1, T1)
    assert [i.slot for i in refreshed.instances] == [0, 2]
    assert refreshed.size == 2 and refreshed.ready_replicas == 2
    assert refreshed.reclaims.total == 1 and refreshed.reclaims.last_time == T1
    ready = render.condition(refreshed, render.READY)
    assert ready is not None and (ready.status, ready.reason) == ("False", "Reclaimed")

    quiet = render.refreshed(status, _result("RUNNING", "RUNNING", "RUNNING", gone=[]), T1, T1)
    assert quiet.reclaims.total == 0 and quiet.phase == Phase.READY


def test_a_failed_refresh_of_a_full_pool_keeps_it_ready() -> None:
    status = render.converged(_base(), _result("RUNNING", "RUNNING"), 1, T0, T0)
    failed = render.failed(status, "refresh", "Throttled", "slow down", 1, T1, T1)
    ready = render.condition(failed, render.READY)
    assert ready is not None and ready.status == "True"


def test_patch_removes_unset_object_fields_but_keeps_lists_clean() -> None:
    status = render.converged(_base(), _result("RUNNING"), 1, T0, T1)
    status = status.model_copy(
        update={"instances": [status.instances[0].model_copy(update={"public_ip": None})]}
    )
    patch = render.to_patch(status)
    assert "publicIp" not in patch["instances"][0]  # lists are replaced whole: just leave out
    assert patch["reclaims"]["lastTime"] is None  # objects merge: null removes a stale value


def test_parse_ignores_what_it_does_not_know() -> None:
    parsed = render.parse({"size": 2, "kopf": {"progress": {}}, "phase": "Ready"})
    assert parsed.size == 2 and parsed.phase == Phase.READY
    assert render.parse({"size": "many"}) == SpotpoolStatus()


def test_inline_credentials_condition_comes_and_goes() -> None:
    with_it = render.inline_credentials(_base(), True, "move them", 1, T0)
    assert render.condition(with_it, render.INLINE_CREDENTIALS) is not None
    without = render.inline_credentials(with_it, False, "move them", 2, T1)
    assert render.condition(without, render.INLINE_CREDENTIALS) is None
