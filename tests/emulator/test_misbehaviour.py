"""The emulator misbehaves on request as the real cloud does over a real network: answers lost
after the call took effect, a listing that lags, RunInstances that makes fewer than asked,
launches that fail, throttling, internal errors and a load balancer's 503 — a real emulator
process, the official SDK, `/_emulator/misbehaviour`, and the `serve`/`misbehave` options."""

import json
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException
from tencentcloud.cvm.v20170312 import models

from tests.emulator.conftest import StartEmulator
from tests.emulator.harness import (
    SPOTPOOL,
    ZONE,
    EmulatorProcess,
    describe,
    error_code,
    ids_of,
    run_spot,
    tag_filter,
    wait_until,
)

pytestmark = pytest.mark.integration

ROUTE = "/_emulator/misbehaviour"
PERFECT: dict[str, Any] = {
    "LoseAnswers": {"Actions": ["RunInstances", "TerminateInstances"], "Rate": 0.0},
    "ListingLagSeconds": 0.0,
    "PartialRunRate": 0.0,
    "LaunchFailedRate": 0.0,
    "ThrottleRate": 0.0,
    "ServerErrorRate": 0.0,
    "Http503Rate": 0.0,
}
NO_COUNTS: dict[str, Any] = {
    "LostAnswers": {},
    "PartialRuns": {"Count": 0, "Runs": []},
    "LaunchFailures": {"Count": 0, "InstanceIds": []},
    "Throttled": 0,
    "ServerErrors": 0,
    "Http503": 0,
}


def _misbehave(emulator: EmulatorProcess, **settings: Any) -> dict[str, Any]:
    reply: dict[str, Any] = emulator.admin_ok("POST", ROUTE, settings)
    return reply


def _counters(emulator: EmulatorProcess) -> dict[str, Any]:
    counters: dict[str, Any] = emulator.admin_ok("GET", ROUTE)["Counters"]
    return counters


def _terminate(client: Any, ids: list[str]) -> None:
    request = models.TerminateInstancesRequest()
    request.InstanceIds = ids
    client.TerminateInstances(request)


def _statuses(client: Any, ids: list[str]) -> tuple[int, dict[str, str]]:
    """DescribeInstancesStatus: TotalCount and each listed instance's state."""
    request = models.DescribeInstancesStatusRequest()
    request.InstanceIds = ids
    reply = json.loads(client.DescribeInstancesStatus(request).to_json_string())
    listed = reply["InstanceStatusSet"] or []
    return int(reply["TotalCount"]), {s["InstanceId"]: s["InstanceState"] for s in listed}


def _lost(call: Any) -> str:
    """The SDK's error when the connection ends without an answer (the test fails otherwise)."""
    with pytest.raises(TencentCloudSDKException) as raised:
        call()
    assert raised.value.code == "ClientNetworkError", raised.value
    return str(raised.value.message)


def _by_id(emulator: EmulatorProcess) -> dict[str, dict[str, Any]]:
    return {i["InstanceId"]: i for i in emulator.all_instances()}


def test_a_perfect_cloud_by_default(emulator: EmulatorProcess) -> None:
    assert emulator.admin_ok("GET", ROUTE) == {"Settings": PERFECT, "Counters": NO_COUNTS}
    client = emulator.cvm()
    ids = run_spot(client, count=3)
    assert len(ids) == 3 and describe(client, InstanceIds=ids)[0] == 3


def test_a_lost_run_instances_answer_launched_and_its_token_finds_it(
    emulator: EmulatorProcess,
) -> None:
    client = emulator.cvm()
    settings = _misbehave(emulator, LoseAnswers={"Rate": 1.0})["Settings"]
    assert settings == {**PERFECT, "LoseAnswers": {**PERFECT["LoseAnswers"], "Rate": 1.0}}
    assert describe(client) == (0, [])  # an action not named answers

    message = _lost(lambda: run_spot(client, count=2, client_token="lost-1"))
    assert "reset" in message and "RequestId" not in message  # a reset, not an answer
    launched = list(_by_id(emulator))
    assert len(launched) == 2  # it all happened
    assert _counters(emulator)["LostAnswers"] == {
        "RunInstances": {"Count": 1, "InstanceIds": launched}
    }
    # Re-sent with its token while answers are still lost: lost again, nothing new made.
    _lost(lambda: run_spot(client, count=2, client_token="lost-1"))
    assert list(_by_id(emulator)) == launched
    # Then heard: the same instances.
    _misbehave(emulator, LoseAnswers={"Rate": 0.0})
    assert run_spot(client, count=2, client_token="lost-1") == launched
    assert list(_by_id(emulator)) == launched
    assert _counters(emulator)["LostAnswers"]["RunInstances"]["Count"] == 2

    calls = emulator.admin_ok("GET", "/_emulator/requests?action=RunInstances")["Requests"]
    assert [(c["Code"], c.get("AnswerLost", False)) for c in calls] == [
        ("OK", True),
        ("OK", True),
        ("OK", False),
    ]
    assert f"answer=lost instances={','.join(launched)}" in emulator.log_text()


def test_a_lost_terminate_answer_terminated(start: StartEmulator) -> None:
    emulator = start(boot_seconds=0.2)
    client = emulator.cvm()
    ids = run_spot(client, count=2)
    _misbehave(emulator, LoseAnswers={"Actions": ["TerminateInstances"], "Rate": 1.0})
    assert len(run_spot(client, count=1)) == 1  # RunInstances is not named now

    _lost(lambda: _terminate(client, ids[:1]))
    held = _by_id(emulator)
    assert held[ids[0]]["InstanceState"] == "TERMINATING" or held[ids[0]]["Gone"]
    assert not held[ids[1]]["Gone"] and held[ids[1]]["InstanceState"] != "TERMINATING"
    assert _counters(emulator)["LostAnswers"] == {
        "TerminateInstances": {"Count": 1, "InstanceIds": ids[:1]}
    }
    wait_until(lambda: _by_id(emulator)[ids[0]]["Gone"], "the terminated instance to be gone")


def test_a_lagging_listing_hides_the_new_and_shows_the_gone_as_they_were(
    start: StartEmulator,
) -> None:
    lag = 2.0
    emulator = start(boot_seconds=0.3)
    client = emulator.cvm()
    _misbehave(emulator, ListingLagSeconds=lag)

    launched_at = time.monotonic()
    ids = run_spot(client, count=2)
    assert describe(client, InstanceIds=ids) == (0, [])
    assert describe(client, Filters=[tag_filter("pool", "test")]) == (0, [])
    assert _statuses(client, ids) == (0, {})
    assert set(_by_id(emulator)) == set(ids)  # there all the same

    wait_until(lambda: describe(client, InstanceIds=ids)[0] == 2, "the new instances listed")
    assert time.monotonic() - launched_at >= lag - 0.1
    total, page = describe(client, Filters=[tag_filter("pool", "test")], Limit=1)
    assert total == 2 and len(page) == 1
    assert {i["InstanceState"] for i in describe(client, InstanceIds=ids)[1]} == {"RUNNING"}

    # One terminated, one reclaimed: both still listed as they were, RUNNING, for the lag.
    gone_at = time.monotonic()
    _terminate(client, ids[:1])
    emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": ids[1:]})
    total, listed = describe(client, InstanceIds=ids)
    assert total == 2 and {i["InstanceState"] for i in listed} == {"RUNNING"}
    assert {i["LatestOperation"] for i in listed} == {"RunInstances"}
    running = [tag_filter("pool", "test"), {"Name": "instance-state", "Values": ["RUNNING"]}]
    assert ids_of(describe(client, Filters=running)[1]) == set(ids)
    assert _statuses(client, ids) == (2, dict.fromkeys(ids, "RUNNING"))
    held = _by_id(emulator)
    assert all(held[i]["Gone"] or held[i]["InstanceState"] == "TERMINATING" for i in ids)

    wait_until(lambda: describe(client, InstanceIds=ids) == (0, []), "the gone ones unlisted")
    assert time.monotonic() - gone_at >= lag - 0.1
    assert _statuses(client, ids) == (0, {})
    # Only the listing lags: the instance a call names is found at once.
    fresh = run_spot(client, count=1)
    _terminate(client, fresh)
    assert describe(client, InstanceIds=fresh) == (0, [])  # made and gone within the lag


def test_partial_runs_make_fewer_than_asked(emulator: EmulatorProcess) -> None:
    client = emulator.cvm()
    emulator.admin_ok(
        "POST", "/_emulator/capacity", {"Zone": ZONE, "InstanceType": "S5.MEDIUM2", "Available": 10}
    )
    _misbehave(emulator, PartialRunRate=1.0)

    ids = run_spot(client, count=4)
    assert 1 <= len(ids) < 4
    assert list(_by_id(emulator)) == ids
    assert _counters(emulator)["PartialRuns"] == {
        "Count": 1,
        "Runs": [{"Requested": 4, "Created": len(ids), "InstanceIds": ids}],
    }
    stock = emulator.admin_ok("GET", "/_emulator/capacity")["Capacity"]
    assert stock == [{"Zone": ZONE, "InstanceType": "S5.MEDIUM2", "Available": 10 - len(ids)}]
    assert len(run_spot(client, count=1)) == 1  # one asked is never fewer


def test_launch_failures_end_in_launch_failed(start: StartEmulator) -> None:
    emulator = start(boot_seconds=0.2)
    client = emulator.cvm()
    _misbehave(emulator, LaunchFailedRate=1.0)
    ids = run_spot(client, count=2)

    def failed() -> list[dict[str, Any]]:
        listed = describe(client, InstanceIds=ids)[1]
        return listed if {i["InstanceState"] for i in listed} == {"LAUNCH_FAILED"} else []

    for instance in wait_until(failed, "the launches to fail"):
        assert instance["LatestOperation"] == "RunInstances"
        assert instance["LatestOperationState"] == "FAILED"
        assert instance["LatestOperationErrorMsg"]
        assert instance["PublicIpAddresses"] is None
    assert _counters(emulator)["LaunchFailures"] == {"Count": 2, "InstanceIds": ids}

    _terminate(client, ids)  # a failed launch is terminated like any instance
    _misbehave(emulator, LaunchFailedRate=0.0)
    healthy = run_spot(client, count=1)
    wait_until(
        lambda: describe(client, InstanceIds=healthy)[1][0]["InstanceState"] == "RUNNING",
        "a launch to succeed again",
    )


def test_throttling_server_errors_and_503s_do_nothing(emulator: EmulatorProcess) -> None:
    client = emulator.cvm()
    _misbehave(emulator, ThrottleRate=1.0)
    assert error_code(lambda: run_spot(client, count=1)) == "RequestLimitExceeded"
    assert error_code(lambda: describe(client)) == "RequestLimitExceeded"

    _misbehave(emulator, ThrottleRate=0.0, ServerErrorRate=1.0)
    assert error_code(lambda: run_spot(client, count=1)) == "InternalError"

    _misbehave(emulator, ServerErrorRate=0.0, Http503Rate=1.0)
    assert error_code(lambda: run_spot(client, count=1)) == "ServerNetworkError"
    raw = urllib.request.Request(emulator.endpoint + "/", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as unavailable:
        urllib.request.urlopen(raw, timeout=10)
    assert unavailable.value.code == 503
    assert b"503 Service Temporarily Unavailable" in unavailable.value.read()

    assert emulator.all_instances() == []
    counters = _counters(emulator)
    assert (counters["Throttled"], counters["ServerErrors"], counters["Http503"]) == (2, 1, 2)
    codes = [c["Code"] for c in emulator.admin_ok("GET", "/_emulator/requests")["Requests"]]
    assert codes == ["RequestLimitExceeded"] * 2 + ["InternalError"] + ["HTTP503"] * 2


def test_delete_is_a_perfect_cloud_again_and_bad_settings_are_refused(
    emulator: EmulatorProcess,
) -> None:
    client = emulator.cvm()
    _misbehave(emulator, ThrottleRate=1.0, ListingLagSeconds=5, LoseAnswers={"Rate": 0.5})
    assert error_code(lambda: describe(client)) == "RequestLimitExceeded"

    assert emulator.admin_ok("DELETE", ROUTE) == {"Settings": PERFECT, "Counters": NO_COUNTS}
    ids = run_spot(client, count=1)
    assert describe(client, InstanceIds=ids)[0] == 1  # no lag either

    for bad in (
        {"ThrottleRate": 1.5},
        {"ThrottleRate": 0.6, "ServerErrorRate": 0.6},
        {"ListingLagSeconds": -1},
        {"LoseAnswers": {"Rate": 0.1, "Often": True}},
        {"Nonsense": 1},
        [1, 2],
    ):
        status, reply = emulator.admin("POST", ROUTE, bad)
        assert status == 400, bad
        assert "ThrottleRate" in reply["Error"]
    assert emulator.admin_ok("GET", ROUTE)["Settings"] == PERFECT


def _outcomes(emulator: EmulatorProcess, calls: int) -> list[str]:
    """What each of `calls` RunInstances of two came to: an error code, a lost answer, or how
    many instances it made and how many of them failed to launch."""
    client, outcomes = emulator.cvm(), []
    for _ in range(calls):
        try:
            outcomes.append(f"made {len(run_spot(client, count=2))}")
        except TencentCloudSDKException as error:
            outcomes.append(str(error.code))
    failed = _counters(emulator)["LaunchFailures"]["Count"]
    return [*outcomes, f"{failed} failed"]


def test_serve_options_set_it_and_the_same_seed_misbehaves_the_same(
    start: StartEmulator, tmp_path: Any
) -> None:
    options = [
        "--seed", "11", "--lose-answers", "0.3", "--lose-answers-actions", "RunInstances",
        "--listing-lag", "1", "--partial-runs", "0.3", "--launch-failures", "0.3",
        "--throttle", "0.1", "--server-errors", "0.1", "--http-503", "0.1",
    ]  # fmt: skip
    first = start(state=tmp_path / "first.db", extra_args=options)
    assert first.admin_ok("GET", ROUTE)["Settings"] == {
        "LoseAnswers": {"Actions": ["RunInstances"], "Rate": 0.3},
        "ListingLagSeconds": 1.0,
        "PartialRunRate": 0.3,
        "LaunchFailedRate": 0.3,
        "ThrottleRate": 0.1,
        "ServerErrorRate": 0.1,
        "Http503Rate": 0.1,
    }
    second = start(state=tmp_path / "second.db", extra_args=options)
    outcomes = _outcomes(first, 16)
    assert _outcomes(second, 16) == outcomes
    assert {"made 1", "made 2", "ClientNetworkError"} <= set(outcomes), outcomes


def _misbehave_cli(emulator: EmulatorProcess, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(SPOTPOOL), "emulator", "misbehave", "--endpoint", emulator.endpoint, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    reply: dict[str, Any] = json.loads(done.stdout)
    return reply


def test_the_misbehave_command_sets_shows_and_clears(emulator: EmulatorProcess) -> None:
    reply = _misbehave_cli(
        emulator, "--listing-lag", "1.5", "--lose-answers", "0.25",
        "--lose-answers-actions", "RunInstances, TerminateInstances, StopInstances",
    )  # fmt: skip
    assert reply["Settings"] == {
        **PERFECT,
        "ListingLagSeconds": 1.5,
        "LoseAnswers": {
            "Actions": ["RunInstances", "TerminateInstances", "StopInstances"],
            "Rate": 0.25,
        },
    }
    assert reply["Counters"] == NO_COUNTS
    assert _misbehave_cli(emulator, "--throttle", "1")["Settings"]["ListingLagSeconds"] == 1.5
    assert error_code(lambda: describe(emulator.cvm())) == "RequestLimitExceeded"
    assert _misbehave_cli(emulator)["Counters"]["Throttled"] == 1
    assert _misbehave_cli(emulator, "--clear") == {"Settings": PERFECT, "Counters": NO_COUNTS}

    refused = subprocess.run(
        [str(SPOTPOOL), "emulator", "misbehave", "--endpoint", emulator.endpoint,
         "--throttle", "0.6", "--server-errors", "0.6"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 1
    assert "the emulator refused" in refused.stderr
