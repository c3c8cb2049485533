"""The tag, cbs and vpc calls the provider makes about an instance, through the SDK's CommonClient.

CommonClient is the official SDK's generic client (part of tencentcloud-sdk-python-common): it
signs for any service, so these need no extra SDK package.
"""

import pytest

from tests.emulator.harness import REGION, EmulatorProcess, describe, run_spot, wait_until

pytestmark = pytest.mark.integration


def test_instance_tags_read_and_changed_through_the_tag_service(
    emulator: EmulatorProcess,
) -> None:
    cvm = emulator.cvm()
    tag = emulator.common("tag", "2018-08-13")
    (instance_id,) = run_spot(cvm, count=1, tags={"pool": "blue"})
    resource = f"qcs::cvm:{REGION}:uin/:instance/{instance_id}"

    tag.call_json(
        "ModifyResourceTags",
        {
            "Resource": resource,
            "ReplaceTags": [{"TagKey": "slot", "TagValue": "0"}],
            "DeleteTags": [{"TagKey": "pool"}],
        },
    )
    reply = tag.call_json(
        "DescribeResourceTagsByResourceIds",
        {
            "ServiceType": "cvm",
            "ResourcePrefix": "instance",
            "ResourceRegion": REGION,
            "ResourceIds": [instance_id],
        },
    )["Response"]

    assert [(t["TagKey"], t["TagValue"]) for t in reply["Tags"]] == [("slot", "0")]
    _, (instance,) = describe(cvm, InstanceIds=[instance_id])
    assert instance["Tags"] == [{"Key": "slot", "Value": "0"}]


def test_system_disk_and_private_ip_are_visible_in_cbs_and_vpc(emulator: EmulatorProcess) -> None:
    cvm = emulator.cvm()
    (instance_id,) = run_spot(cvm, count=1)
    instance = wait_until(
        lambda: next(
            (i for i in describe(cvm, InstanceIds=[instance_id])[1] if i["PrivateIpAddresses"]),
            None,
        ),
        "a private IP",
    )

    disks = emulator.common("cbs", "2017-03-12").call_json(
        "DescribeDisks", {"Filters": [{"Name": "instance-id", "Values": [instance_id]}]}
    )["Response"]
    assert [d["DiskId"] for d in disks["DiskSet"]] == [instance["SystemDisk"]["DiskId"]]
    assert disks["DiskSet"][0]["DiskUsage"] == "SYSTEM_DISK"

    vpc = instance["VirtualPrivateCloud"]
    used = emulator.common("vpc", "2017-03-12").call_json(
        "DescribeUsedIpAddress", {"VpcId": vpc["VpcId"], "SubnetId": vpc["SubnetId"]}
    )["Response"]
    assert [(u["IpAddress"], u["ResourceId"]) for u in used["IpAddressStates"]] == [
        (instance["PrivateIpAddresses"][0], instance_id)
    ]
