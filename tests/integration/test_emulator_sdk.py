"""The emulator as the official Tencent Cloud SDK for Python sees it."""

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
from tencentcloud.common.exception.tencent_cloud_sdk_exception import (
    TencentCloudSDKException,
)
from tencentcloud.cvm.v20170312 import cvm_client, models

from tests.integration.conftest import Emulator

pytestmark = pytest.mark.integration

ZONE = "ap-singapore-2"
GPU = "GN7.2XLARGE32"


def spot_request(count: int = 1, **extra: Any) -> models.RunInstancesRequest:
    body = {
        "Placement": {"Zone": ZONE},
        "ImageId": "img-eb30mz89",
        "InstanceType": GPU,
        "InstanceCount": count,
        "InstanceChargeType": "SPOTPAID",
        "InstanceMarketOptions": {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time"},
        },
        "VirtualPrivateCloud": {"VpcId": "DEFAULT", "SubnetId": "DEFAULT"},
        "InternetAccessible": {"InternetMaxBandwidthOut": 1, "PublicIpAssigned": True},
        "TagSpecification": [{"ResourceType": "instance", "Tags": [{"Key": "pool", "Value": "a"}]}],
        **extra,
    }
    request = models.RunInstancesRequest()
    request.from_json_string(json.dumps(body))
    return request


def describe(client: cvm_client.CvmClient, **body: Any) -> models.DescribeInstancesResponse:
    request = models.DescribeInstancesRequest()
    request.from_json_string(json.dumps(body))
    return client.DescribeInstances(request)


def states(client: cvm_client.CvmClient) -> dict[str, str]:
    return {i.InstanceId: i.InstanceState for i in describe(client, Limit=100).InstanceSet}


def eventually(check: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def error_code(call: Callable[[], object]) -> str:
    with pytest.raises(TencentCloudSDKException) as raised:
        call()
    return str(raised.value.code)


def test_spot_instances_boot_pending_then_running_with_ips(emulator: Emulator) -> None:
    client = emulator.cvm()
    ids = client.RunInstances(spot_request(3)).InstanceIdSet
    assert len(set(ids)) == 3
    first = describe(client, InstanceIds=ids)
    assert first.TotalCount == 3
    assert {i.InstanceState for i in first.InstanceSet} == {"PENDING"}
    eventually(lambda: set(states(client).values()) == {"RUNNING"})
    running = describe(client, InstanceIds=ids).InstanceSet
    assert all(i.PrivateIpAddresses and i.PublicIpAddresses for i in running)
    assert len({i.PrivateIpAddresses[0] for i in running}) == 3
    assert {i.InstanceChargeType for i in running} == {"SPOTPAID"}
    assert {i.GPUInfo.GPUType for i in running} == {"NVIDIA T4"}


def test_filters_by_tag_state_and_paging(emulator: Emulator) -> None:
    client = emulator.cvm()
    pool = client.RunInstances(spot_request(3)).InstanceIdSet
    other = client.RunInstances(
        spot_request(
            1,
            TagSpecification=[
                {"ResourceType": "instance", "Tags": [{"Key": "pool", "Value": "b"}]}
            ],
        )
    ).InstanceIdSet
    by_tag = describe(client, Filters=[{"Name": "tag:pool", "Values": ["a"]}])
    assert sorted(i.InstanceId for i in by_tag.InstanceSet) == sorted(pool)
    assert describe(client, Filters=[{"Name": "tag-key", "Values": ["pool"]}]).TotalCount == 4
    pending = describe(client, Filters=[{"Name": "instance-state", "Values": ["PENDING"]}])
    assert pending.TotalCount == 4
    eventually(
        lambda: (
            describe(client, Filters=[{"Name": "instance-state", "Values": ["RUNNING"]}]).TotalCount
            == 4
        )
    )
    pages = [
        describe(client, Filters=[{"Name": "tag:pool", "Values": ["a"]}], Offset=n, Limit=1)
        for n in range(3)
    ]
    assert [p.TotalCount for p in pages] == [3, 3, 3]
    assert sorted(p.InstanceSet[0].InstanceId for p in pages) == sorted(pool)
    assert other[0] not in {p.InstanceSet[0].InstanceId for p in pages}
    assert (
        error_code(lambda: describe(client, Filters=[{"Name": "colour", "Values": ["x"]}]))
        == "InvalidFilter"
    )


def test_the_same_client_token_returns_the_same_ids(emulator: Emulator) -> None:
    client = emulator.cvm()
    first = client.RunInstances(spot_request(2, ClientToken="pool-a-slot-0")).InstanceIdSet
    again = client.RunInstances(spot_request(2, ClientToken="pool-a-slot-0")).InstanceIdSet
    assert first == again
    assert len(states(client)) == 2


def test_terminate_removes_the_instance(emulator: Emulator) -> None:
    client = emulator.cvm()
    keep, doomed = client.RunInstances(spot_request(2)).InstanceIdSet
    request = models.TerminateInstancesRequest()
    request.InstanceIds = [doomed]
    client.TerminateInstances(request)
    assert states(client)[doomed] == "TERMINATING"
    eventually(lambda: set(states(client)) == {keep})
    assert error_code(lambda: client.TerminateInstances(request)) == "InvalidInstanceId.NotFound"
    gone = {i["InstanceId"]: i for i in emulator.admin("GET", "instances")["Instances"]}
    assert gone[doomed]["GoneReason"] == "terminated"


def test_reclaim_by_admin_route_and_cli(emulator: Emulator) -> None:
    client = emulator.cvm()
    ids = client.RunInstances(spot_request(3)).InstanceIdSet
    eventually(lambda: set(states(client).values()) == {"RUNNING"})
    reclaimed = emulator.admin("POST", "reclaim", {"InstanceIds": [ids[0]]})["Reclaimed"]
    assert reclaimed == [ids[0]]
    cli = subprocess.run(
        [sys.executable, "-m", "spotpool", "emulator", "reclaim", "--endpoint", emulator.endpoint,
         "--count", "1", "--zone", ZONE],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    second = cli.stdout.split()
    assert len(second) == 1 and second[0] in ids[1:]
    eventually(lambda: len(states(client)) == 1)
    survivors = set(states(client))
    assert survivors == set(ids) - {ids[0], second[0]}
    listing = {i["InstanceId"]: i for i in emulator.admin("GET", "instances")["Instances"]}
    assert listing[ids[0]]["GoneReason"] == "reclaimed"
    assert listing[ids[0]]["SpotTerminationTime"]
    assert emulator.admin("POST", "reclaim", {"Count": 5})["status"] == 409


def test_wrong_key_is_a_signature_failure(emulator: Emulator) -> None:
    code = error_code(lambda: describe(emulator.cvm(secret_key="not-the-key")))
    assert code == "AuthFailure.SignatureFailure"


def test_a_stale_timestamp_is_refused(emulator: Emulator) -> None:
    client = emulator.cvm()
    ten_minutes_ago = time.time() - 600
    # The SDK signs with time.time(): a clock ten minutes slow makes a real but stale signature.
    with mock.patch("tencentcloud.common.abstract_client.time.time", return_value=ten_minutes_ago):
        code = error_code(lambda: describe(client))
    assert code == "AuthFailure.SignatureExpire"


def test_exhausted_stock_fails_and_creates_nothing(emulator: Emulator) -> None:
    client = emulator.cvm()
    emulator.admin("POST", "capacity", {"Zone": ZONE, "InstanceType": GPU, "Available": 2})
    code = error_code(lambda: client.RunInstances(spot_request(3)))
    assert code == "ResourceInsufficient.SpecifiedInstanceType"
    assert states(client) == {}
    assert len(client.RunInstances(spot_request(2)).InstanceIdSet) == 2
    assert (
        error_code(lambda: client.RunInstances(spot_request(1)))
        == "ResourceInsufficient.SpecifiedInstanceType"
    )


def test_injected_throttling_then_cleared(emulator: Emulator) -> None:
    client = emulator.cvm()
    emulator.admin(
        "POST",
        "faults",
        {
            "Service": "cvm",
            "Action": "DescribeInstances",
            "Code": "RequestLimitExceeded",
            "Rate": 1.0,
        },
    )
    assert error_code(lambda: describe(client)) == "RequestLimitExceeded"
    client.RunInstances(spot_request(1))  # other actions still served
    emulator.admin("DELETE", "faults")
    assert describe(client).TotalCount == 1


def test_unknown_action_and_bad_parameters(emulator: Emulator) -> None:
    client = emulator.cvm()
    assert error_code(lambda: client.call_json("LaunchRockets", {})) == "InvalidAction"
    assert (
        error_code(lambda: client.call_json("RunInstances", {"ImageId": "img-1"}))
        == "MissingParameter"
    )
    wrong_zone = spot_request(1, Placement={"Zone": "ap-tokyo-1"})
    assert error_code(lambda: client.RunInstances(wrong_zone)) == "InvalidZone.MismatchRegion"
    weak = spot_request(1, LoginSettings={"Password": "password"})
    assert error_code(lambda: client.RunInstances(weak)) == "InvalidPassword"
    assert states(client) == {}


def test_a_restarted_emulator_has_the_same_cloud(emulator: Emulator) -> None:
    client = emulator.cvm()
    ids = client.RunInstances(spot_request(2, ClientToken="t")).InstanceIdSet
    eventually(lambda: set(states(client).values()) == {"RUNNING"})
    before = {i.InstanceId: i.PrivateIpAddresses for i in describe(client).InstanceSet}
    emulator.stop()
    emulator.start()
    after = {i.InstanceId: i.PrivateIpAddresses for i in describe(client).InstanceSet}
    assert after == before and set(after) == set(ids)
    assert client.RunInstances(spot_request(2, ClientToken="t")).InstanceIdSet == ids


def test_concurrent_runs_get_distinct_instances(emulator: Emulator) -> None:
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(list(emulator.cvm().RunInstances(spot_request(5)).InstanceIdSet))
        except BaseException as error:  # surfaced by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    ids = [i for batch in results for i in batch]
    assert len(ids) == len(set(ids)) == 40
    assert describe(emulator.cvm(), Limit=1).TotalCount == 40


def test_the_log_names_every_action_served(emulator: Emulator) -> None:
    client = emulator.cvm()
    client.RunInstances(spot_request(1))
    describe(client)
    log = emulator.log.read_text()
    assert "action=cvm.RunInstances region=ap-singapore code=OK" in log
    assert "action=cvm.DescribeInstances region=ap-singapore code=OK" in log
    assert emulator.secret_key not in log
