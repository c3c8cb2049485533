"""Console-style edits of a running instance (ModifyInstancesAttribute, tag changes,
StopInstances) through the official SDK: the checks the real API makes, and what
DescribeInstances and the tag API then show (what the provider's refresh reads)."""

import pytest

from tests.emulator.harness import (
    REGION,
    EmulatorProcess,
    describe,
    error_code,
    run_spot,
    wait_until,
)

pytestmark = pytest.mark.integration


def _running(emulator: EmulatorProcess) -> str:
    client = emulator.cvm()
    (instance_id,) = run_spot(client, count=1)
    wait_until(lambda: _state(emulator, instance_id) == "RUNNING", "the boot", timeout=30)
    return instance_id


def _state(emulator: EmulatorProcess, instance_id: str) -> str:
    return str(_described(emulator, instance_id)["InstanceState"])


def _described(emulator: EmulatorProcess, instance_id: str) -> dict:  # type: ignore[type-arg]
    _, (found,) = describe(emulator.cvm(), InstanceIds=[instance_id])
    return found


def test_a_rename_and_a_new_security_group_show_in_describe(emulator: EmulatorProcess) -> None:
    instance_id = _running(emulator)
    client = emulator.cvm()

    client.call_json(
        "ModifyInstancesAttribute", {"InstanceIds": [instance_id], "InstanceName": "by-hand"}
    )
    client.call_json(
        "ModifyInstancesAttribute",
        {"InstanceIds": [instance_id], "SecurityGroups": ["sg-2", "sg-3"]},
    )

    found = _described(emulator, instance_id)
    assert found["InstanceName"] == "by-hand"
    assert found["SecurityGroupIds"] == ["sg-2", "sg-3"]
    assert (found["LatestOperation"], found["LatestOperationState"]) == (
        "ModifyInstancesAttribute",
        "SUCCESS",
    )


def test_modify_refuses_what_the_api_refuses(emulator: EmulatorProcess) -> None:
    instance_id = _running(emulator)
    client = emulator.cvm()

    def modify(**attributes: object) -> object:
        return client.call_json(
            "ModifyInstancesAttribute", {"InstanceIds": [instance_id], **attributes}
        )

    both = {"InstanceName": "x", "SecurityGroups": ["sg-2"]}
    assert error_code(lambda: modify(**both)) == "InvalidParameterCombination"
    assert error_code(lambda: modify(InstanceName="n" * 61)) == "InvalidInstanceName.TooLong"
    assert error_code(lambda: modify()) == "MissingParameter"
    assert error_code(lambda: modify(SecurityGroups=["nope"])) == "InvalidParameterValue"
    client.call_json("RebootInstances", {"InstanceIds": [instance_id]})
    assert error_code(lambda: modify(InstanceName="x")) == (
        "OperationDenied.InstanceOperationInProgress"
    )
    assert _described(emulator, instance_id)["InstanceName"] == "spotpool-test"


def test_a_console_stop_passes_through_stopping_and_refuses_stop_charging_for_spot(
    emulator: EmulatorProcess,
) -> None:
    instance_id = _running(emulator)
    client = emulator.cvm()

    def stop(**options: object) -> object:
        return client.call_json("StopInstances", {"InstanceIds": [instance_id], **options})

    assert error_code(lambda: stop(StoppedMode="STOP_CHARGING")) == (
        "UnsupportedOperation.StoppedModeStopCharging"
    )
    assert error_code(lambda: stop(StopType="GENTLY")) == "InvalidParameterValue"
    assert error_code(lambda: stop(StopType="SOFT", ForceStop=True)) == (
        "InvalidParameterCombination"
    )
    stop(StopType="SOFT", StoppedMode="KEEP_CHARGING")
    assert _state(emulator, instance_id) == "STOPPING"
    wait_until(lambda: _state(emulator, instance_id) == "STOPPED", "the stop", timeout=30)
    # Stopped, it can still be renamed (as in the console), and started again.
    client.call_json(
        "ModifyInstancesAttribute", {"InstanceIds": [instance_id], "InstanceName": "y"}
    )
    client.call_json("StartInstances", {"InstanceIds": [instance_id]})
    wait_until(lambda: _state(emulator, instance_id) == "RUNNING", "the start", timeout=30)


def test_a_tag_added_by_hand_shows_in_describe_and_the_tag_api(emulator: EmulatorProcess) -> None:
    instance_id = _running(emulator)
    emulator.common("tag", "2018-08-13").call_json(
        "ModifyResourceTags",
        {
            "Resource": f"qcs::cvm:{REGION}:uin/:instance/{instance_id}",
            "ReplaceTags": [{"TagKey": "owner", "TagValue": "bob"}],
        },
    )

    tags = {t["Key"]: t["Value"] for t in _described(emulator, instance_id)["Tags"]}
    assert tags["owner"] == "bob"
    reply = emulator.common("tag", "2018-08-13").call_json(
        "DescribeResourceTagsByResourceIds",
        {"ServiceType": "cvm", "ResourcePrefix": "instance", "ResourceIds": [instance_id]},
    )
    listed = {t["TagKey"]: t["TagValue"] for t in reply["Response"]["Tags"]}
    assert listed["owner"] == "bob"
