"""SDK-level helpers for the emulator tests; the emulator process itself is the local world's
(spotpool.localworld.emulator), re-exported here for the tests that import it from here."""

import json
from collections.abc import Callable
from typing import Any

from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException
from tencentcloud.cvm.v20170312 import models

from spotpool.localworld.emulator import (
    IMAGE_ID,
    INSTANCE_TYPE,
    OTHER_ZONE,
    READY_TIMEOUT,
    REGION,
    SECRET_ID,
    SECRET_KEY,
    SPOTPOOL,
    ZONE,
    EmulatorProcess,
    start_emulator,
    stop_orphaned_plugins,
    wait_until,
)
from spotpool.ports import free_port

__all__ = [
    "IMAGE_ID",
    "INSTANCE_TYPE",
    "OTHER_ZONE",
    "READY_TIMEOUT",
    "REGION",
    "SECRET_ID",
    "SECRET_KEY",
    "SPOTPOOL",
    "ZONE",
    "EmulatorProcess",
    "free_port",
    "start_emulator",
    "stop_orphaned_plugins",
    "wait_until",
]


# -- SDK helpers -----------------------------------------------------------------------------
def spot_request(
    count: int = 3,
    zone: str = ZONE,
    tags: dict[str, str] | None = None,
    client_token: str | None = None,
    instance_type: str = INSTANCE_TYPE,
    **extra: Any,
) -> Any:
    """A RunInstances request for one-time spot instances, as the stack program asks for them.

    `extra` adds (or replaces) top-level parameters, for example `LoginSettings`.
    """
    body: dict[str, Any] = {
        "InstanceChargeType": "SPOTPAID",
        "InstanceMarketOptions": {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time", "MaxPrice": "1.5"},
        },
        "Placement": {"Zone": zone},
        "ImageId": IMAGE_ID,
        "InstanceType": instance_type,
        "InstanceCount": count,
        "InstanceName": "spotpool-test",
        "VirtualPrivateCloud": {"VpcId": "DEFAULT", "SubnetId": "DEFAULT"},
        "InternetAccessible": {
            "InternetChargeType": "TRAFFIC_POSTPAID_BY_HOUR",
            "InternetMaxBandwidthOut": 10,
            "PublicIpAssigned": True,
        },
        "TagSpecification": [
            {
                "ResourceType": "instance",
                "Tags": [{"Key": k, "Value": v} for k, v in (tags or {"pool": "test"}).items()],
            }
        ],
    }
    if client_token is not None:
        body["ClientToken"] = client_token
    body.update(extra)
    request = models.RunInstancesRequest()
    request.from_json_string(json.dumps(body))
    return request


def run_spot(client: Any, **kwargs: Any) -> list[str]:
    """RunInstances through the SDK; the new instance ids."""
    reply = client.RunInstances(spot_request(**kwargs))
    return [str(i) for i in reply.InstanceIdSet]


def describe(client: Any, **params: Any) -> tuple[int, list[dict[str, Any]]]:
    """DescribeInstances through the SDK: TotalCount and the page, as plain dicts."""
    request = models.DescribeInstancesRequest()
    request.from_json_string(json.dumps(params))
    reply = json.loads(client.DescribeInstances(request).to_json_string())
    return int(reply["TotalCount"]), list(reply["InstanceSet"] or [])


def tag_filter(key: str, value: str) -> dict[str, Any]:
    return {"Name": f"tag:{key}", "Values": [value]}


def ids_of(instances: list[dict[str, Any]]) -> set[str]:
    return {str(i["InstanceId"]) for i in instances}


def error_code(call: Callable[[], object]) -> str:
    """The API error code `call` fails with (the test fails if it succeeds)."""
    try:
        call()
    except TencentCloudSDKException as error:
        return str(error.code)
    raise AssertionError("the call succeeded; an API error was expected")
