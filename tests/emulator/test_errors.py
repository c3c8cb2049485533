"""The emulator refuses as Tencent Cloud refuses: same error codes, nothing half done."""

import functools
import time
import urllib.request
from types import SimpleNamespace

import pytest
from tencentcloud.common import abstract_client

from tests.emulator.harness import (
    INSTANCE_TYPE,
    REGION,
    ZONE,
    EmulatorProcess,
    describe,
    error_code,
    run_spot,
    spot_request,
)

pytestmark = pytest.mark.integration


def test_wrong_secret_key_is_a_signature_failure(emulator: EmulatorProcess) -> None:
    intruder = emulator.cvm(secret_key="not-the-" + emulator.secret_key)

    assert error_code(lambda: describe(intruder)) == "AuthFailure.SignatureFailure"
    assert error_code(lambda: run_spot(intruder, count=1)) == "AuthFailure.SignatureFailure"
    assert emulator.all_instances() == []
    # The log still names the service, taken from the credential scope the caller signed for.
    log = emulator.log_text()
    assert f"action=cvm.DescribeInstances region={REGION} code=AuthFailure.SignatureFailure" in log
    assert f"action=cvm.RunInstances region={REGION} code=AuthFailure.SignatureFailure" in log
    assert emulator.secret_key not in log


def test_unsigned_request_is_refused_and_logged_with_the_service_of_its_host(
    emulator: EmulatorProcess,
) -> None:
    request = urllib.request.Request(
        emulator.endpoint + "/",
        data=b"{}",
        method="POST",
        headers={
            "Host": "cvm.tencentcloudapi.com",
            "Content-Type": "application/json",
            "X-TC-Action": "DescribeInstances",
            "X-TC-Region": REGION,
        },
    )
    with urllib.request.urlopen(request, timeout=10) as reply:  # API errors are HTTP 200
        body = reply.read()

    assert b'"Code":"AuthFailure.SignatureFailure"' in body
    log = emulator.log_text()
    assert f"action=cvm.DescribeInstances region={REGION} code=AuthFailure.SignatureFailure" in log


def test_unknown_secret_id_is_not_found(emulator: EmulatorProcess) -> None:
    stranger = emulator.cvm(secret_id="AKIDnobodyknowsthis000000000000000000")

    assert error_code(lambda: describe(stranger)) == "AuthFailure.SecretIdNotFound"


@pytest.mark.parametrize("skew", [-600, 600])
def test_signature_more_than_five_minutes_off_has_expired(
    emulator: EmulatorProcess, monkeypatch: pytest.MonkeyPatch, skew: int
) -> None:
    """A correct signature over a stale (or future) X-TC-Timestamp: the SDK signs at `now+skew`."""
    real_time = time.time
    monkeypatch.setattr(abstract_client, "time", SimpleNamespace(time=lambda: real_time() + skew))

    assert error_code(lambda: describe(emulator.cvm())) == "AuthFailure.SignatureExpire"


def test_signature_a_little_off_is_still_accepted(
    emulator: EmulatorProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same faked clock, within the five minutes: proves the expiry test signs correctly."""
    real_time = time.time
    monkeypatch.setattr(abstract_client, "time", SimpleNamespace(time=lambda: real_time() - 120))

    assert describe(emulator.cvm()) == (0, [])


def test_spot_stock_exhausted_creates_nothing(emulator: EmulatorProcess) -> None:
    client = emulator.cvm()
    emulator.admin_ok(
        "POST",
        "/_emulator/capacity",
        {"Zone": ZONE, "InstanceType": INSTANCE_TYPE, "Available": 2},
    )

    code = error_code(lambda: run_spot(client, count=3))

    assert code == "ResourceInsufficient.SpecifiedInstanceType"
    assert emulator.all_instances() == []
    assert describe(client) == (0, [])
    two = run_spot(client, count=2)  # exactly the stock is fine...
    assert len(two) == 2
    code = error_code(lambda: run_spot(client, count=1))  # ...and then it is gone
    assert code == "ResourceInsufficient.SpecifiedInstanceType"
    assert len(emulator.all_instances()) == 2
    assert len(run_spot(client, count=1, instance_type="S5.LARGE8")) == 1  # other types sell


def test_injected_throttling_answers_request_limit_exceeded_until_cleared(
    emulator: EmulatorProcess,
) -> None:
    client = emulator.cvm()
    ids = run_spot(client, count=1)
    emulator.admin_ok(
        "POST",
        "/_emulator/faults",
        {
            "Service": "cvm",
            "Action": "DescribeInstances",
            "Code": "RequestLimitExceeded",
            "Rate": 1,
        },
    )

    for _ in range(3):
        assert error_code(lambda: describe(client)) == "RequestLimitExceeded"
    assert len(run_spot(client, count=1)) == 1  # only the named action is throttled

    emulator.admin_ok("DELETE", "/_emulator/faults")
    total, instances = describe(client)
    assert total == 2
    assert ids[0] in {i["InstanceId"] for i in instances}


def test_unknown_action_is_invalid_action_never_a_fake_success(emulator: EmulatorProcess) -> None:
    client = emulator.cvm()

    assert error_code(lambda: client.call_json("DescribeUnicorns", {})) == "InvalidAction"
    assert "action=cvm.DescribeUnicorns" in emulator.log_text()


def test_gone_instance_id_is_not_found(emulator: EmulatorProcess) -> None:
    client = emulator.cvm()

    def stop_nobody() -> object:
        return client.call_json("StopInstances", {"InstanceIds": ["ins-00000000"]})

    assert error_code(stop_nobody) == "InvalidInstanceId.NotFound"


def test_missing_parameter_is_missing_parameter(emulator: EmulatorProcess) -> None:
    client = emulator.cvm()

    assert error_code(lambda: client.call_json("RunInstances", {})) == "MissingParameter"
    assert emulator.all_instances() == []


def test_unknown_filter_is_invalid_filter(emulator: EmulatorProcess) -> None:
    client = emulator.cvm()
    run_spot(client, count=1)

    colour = [{"Name": "colour", "Values": ["blue"]}]
    assert error_code(lambda: describe(client, Filters=colour)) == "InvalidFilter"


def test_zone_of_another_region_creates_nothing(emulator: EmulatorProcess) -> None:
    client = emulator.cvm()
    elsewhere = spot_request(count=1, zone="ap-shanghai-2")  # the client's region is guangzhou

    assert error_code(lambda: client.RunInstances(elsewhere)) == "InvalidZone.MismatchRegion"
    assert emulator.all_instances() == []


def test_weak_password_is_invalid_password_and_creates_nothing(emulator: EmulatorProcess) -> None:
    client = emulator.cvm()

    for password in ["password", "Sh0rt!", "alllowercaseanddigits123"]:
        weak = spot_request(count=1, LoginSettings={"Password": password})
        code = error_code(functools.partial(client.RunInstances, weak))
        assert code == "InvalidPassword", password
    assert emulator.all_instances() == []
