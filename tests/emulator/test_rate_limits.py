"""The emulator's switch for Tencent Cloud's per-action request limits, and the parameters its
request log keeps: a real emulator process, the official SDK. The tests count what passes and
what is refused, in order; how fast the emulator answers is bench/emulator_describe.py's."""

import hashlib
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException
from tencentcloud.cvm.v20170312 import models

from tests._support.buckets import most_over_bucket
from tests.emulator.conftest import StartEmulator
from tests.emulator.harness import EmulatorProcess, describe, run_spot, spot_request

pytestmark = pytest.mark.integration


def _burst(call: Callable[[], object], times: int) -> list[str]:
    """Call `times` times back to back; each call's outcome ("OK" or the error code)."""
    outcomes = []
    for _ in range(times):
        try:
            call()
            outcomes.append("OK")
        except TencentCloudSDKException as error:
            outcomes.append(str(error.code))
    return outcomes


def test_limits_are_off_by_default(emulator: EmulatorProcess) -> None:
    client = emulator.cvm()
    assert emulator.admin_ok("GET", "/_emulator/rate-limits")["Enabled"] is False
    outcomes = _burst(lambda: client.RunInstances(spot_request(count=1)), 15)
    assert outcomes == ["OK"] * 15


def _until_refused(call: Callable[[], object], at_most: int, then: int) -> list[str]:
    """Call back to back until the first refusal and `then` calls more (at most `at_most`):
    however slow the machine, a burst faster than the limit meets its refusal."""
    outcomes: list[str] = []
    while len(outcomes) < at_most and outcomes.count("RequestLimitExceeded") <= then:
        outcomes.extend(_burst(call, 1))
    return outcomes


def _admitted_times(emulator: EmulatorProcess, action: str) -> list[float]:
    """When each admitted call of `action` arrived, by the emulator's clock (its request log)."""
    log = emulator.admin_ok("GET", f"/_emulator/requests?action={action}")["Requests"]
    return [c["Time"] for c in log if c["Code"] == "OK"]


def test_run_instances_over_ten_a_second_is_request_limit_exceeded(
    emulator: EmulatorProcess,
) -> None:
    client = emulator.cvm()
    emulator.admin_ok("POST", "/_emulator/rate-limits", {"Enabled": True})
    outcomes = _until_refused(lambda: client.RunInstances(spot_request(count=1)), 200, then=4)
    accepted = outcomes.count("OK")
    assert set(outcomes) == {"OK", "RequestLimitExceeded"}
    assert outcomes[:10] == ["OK"] * 10  # a full bucket: a burst of ten passes
    # A bucket of ten refilled at ten a second: what passed fits it, at the emulator's clock.
    assert most_over_bucket(_admitted_times(emulator, "RunInstances"), 10, burst=10) <= 1
    # A refused call created nothing; the log names it with the API's code.
    live = [i for i in emulator.all_instances() if not i.get("Gone")]
    assert len(live) == accepted
    log = emulator.admin_ok("GET", "/_emulator/requests?action=RunInstances")["Requests"]
    assert [c["Code"] for c in log] == outcomes
    assert emulator.admin_ok("GET", "/_emulator/rate-limits")["Refused"] == len(outcomes) - accepted

    # Other actions have limits of their own, and a second later RunInstances passes again
    # (a second refills the bucket whatever happened before: a wait for time, not for news).
    assert describe(client)[0] == accepted
    time.sleep(1.0)
    assert len(run_spot(client, count=1)) == 1


def test_describe_instances_allows_forty_a_second(emulator: EmulatorProcess) -> None:
    client = emulator.cvm()
    emulator.admin_ok("POST", "/_emulator/rate-limits", {"Enabled": True})
    outcomes = _until_refused(lambda: describe(client), 1000, then=4)
    assert outcomes[:40] == ["OK"] * 40  # a full bucket of forty
    assert "RequestLimitExceeded" in outcomes[40:]
    assert most_over_bucket(_admitted_times(emulator, "DescribeInstances"), 40, burst=40) <= 1


def test_limits_are_per_region(emulator: EmulatorProcess) -> None:
    emulator.admin_ok("POST", "/_emulator/rate-limits", {"Enabled": True, "Rates": {}, "Other": 2})
    here = emulator.cvm()
    there = emulator.cvm()
    there.region = "ap-singapore"
    assert _burst(lambda: here.DescribeRegions(models.DescribeRegionsRequest()), 3) == [
        "OK",
        "OK",
        "RequestLimitExceeded",
    ]
    assert _burst(lambda: there.DescribeRegions(models.DescribeRegionsRequest()), 2) == ["OK"] * 2


def test_switched_on_from_the_command_line_environment(
    start: StartEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTPOOL_EMULATOR_RATE_LIMITS", "1")  # as `--rate-limits`
    emulator = start(tmp_path / "limited.db")
    assert emulator.admin_ok("GET", "/_emulator/rate-limits")["Enabled"] is True
    client = emulator.cvm()
    # however slow the machine: until the first refusal (a loaded run's 13 back-to-back calls
    # once took longer than the bucket's refill)
    outcomes = _until_refused(lambda: client.RunInstances(spot_request(count=1)), 200, then=0)
    assert "RequestLimitExceeded" in outcomes
    emulator.admin_ok("POST", "/_emulator/rate-limits", {"Enabled": False})
    assert _burst(lambda: client.RunInstances(spot_request(count=1)), 13) == ["OK"] * 13


def test_request_log_keeps_parameters_with_the_password_fingerprinted(
    emulator: EmulatorProcess,
) -> None:
    client = emulator.cvm()
    password = "Sp0tpool-test-pw!"
    login = {"Password": password, "KeepImageLogin": "FALSE"}
    ids = run_spot(client, count=1, client_token="log-params-1", LoginSettings=login)
    (call,) = emulator.admin_ok("GET", "/_emulator/requests?action=RunInstances")["Requests"]
    params = call["Params"]
    assert params["ClientToken"] == "log-params-1"
    assert params["Placement"] == {"Zone": "ap-guangzhou-3"}
    assert params["InstanceMarketOptions"]["SpotOptions"]["MaxPrice"] == "1.5"
    digest = hashlib.sha256(password.encode()).hexdigest()
    assert params["LoginSettings"] == {"Password": f"sha256:{digest}", "KeepImageLogin": "FALSE"}
    assert password not in emulator.log_text()
    # the same token again: the same instance, nothing new, and the call is logged too
    assert run_spot(client, count=1, client_token="log-params-1", LoginSettings=login) == ids
    assert len(emulator.all_instances()) == 1
    log = emulator.admin_ok("GET", "/_emulator/requests?action=RunInstances")["Requests"]
    assert len(log) == 2 and log[1]["Params"] == params
