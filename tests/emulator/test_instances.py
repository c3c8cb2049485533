"""The life of spot instances in the emulator, seen through the official Tencent Cloud SDK."""

import subprocess
import threading
from typing import Any

import pytest
from tencentcloud.cvm.v20170312 import models

from spotpool.api.stackconfig import TAG_POOL_UID, TAG_SLOT
from spotpool.engine.tencent import cloud
from tests.emulator.conftest import StartEmulator
from tests.emulator.harness import (
    IMAGE_ID,
    INSTANCE_TYPE,
    OTHER_ZONE,
    REGION,
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


def _states(client: Any, ids: list[str]) -> dict[str, str]:
    _, instances = describe(client, InstanceIds=ids)
    return {str(i["InstanceId"]): str(i["InstanceState"]) for i in instances}


def _all_running(client: Any, ids: list[str]) -> list[dict[str, Any]] | None:
    total, instances = describe(client, InstanceIds=ids)
    if total == len(ids) and all(i["InstanceState"] == "RUNNING" for i in instances):
        return instances
    return None


def _live_ids(client: Any) -> set[str]:
    _, instances = describe(client, Limit=100)
    return ids_of(instances)


def test_spot_instances_boot_from_pending_to_running_with_addresses(
    emulator: EmulatorProcess,
) -> None:
    client = emulator.cvm()
    ids = run_spot(client, count=3)
    assert len(set(ids)) == 3

    assert set(_states(client, ids).values()) == {"PENDING"}
    running = wait_until(lambda: _all_running(client, ids), "3 instances RUNNING", timeout=10)

    assert ids_of(running) == set(ids)
    private_ips = [ip for i in running for ip in i["PrivateIpAddresses"]]
    public_ips = [ip for i in running for ip in i["PublicIpAddresses"]]
    assert len(set(private_ips)) == 3, private_ips
    assert len(set(public_ips)) == 3, public_ips
    for instance in running:
        assert instance["InstanceChargeType"] == "SPOTPAID"
        assert instance["Placement"]["Zone"] == ZONE
        assert instance["InstanceType"] == INSTANCE_TYPE
        assert {"Key": "pool", "Value": "test"} in instance["Tags"]


def test_gpu_instance_types_describe_their_gpus(emulator: EmulatorProcess) -> None:
    client = emulator.cvm()
    (gpu,) = run_spot(client, count=1, instance_type="GN7.2XLARGE32")
    (plain,) = run_spot(client, count=1)

    _, instances = describe(client, InstanceIds=[gpu, plain])
    by_id = {i["InstanceId"]: i for i in instances}
    assert by_id[gpu]["GPUInfo"]["GPUType"] == "NVIDIA T4"
    assert by_id[gpu]["GPUInfo"]["GPUCount"] == 1
    assert (by_id[gpu]["CPU"], by_id[gpu]["Memory"]) == (8, 32)
    assert by_id[plain].get("GPUInfo") is None


def test_describe_filters_by_tag_and_by_state(emulator: EmulatorProcess) -> None:
    client = emulator.cvm()
    blue = run_spot(client, count=3, tags={"pool": "blue", "team": "ml"})
    green = run_spot(client, count=2, tags={"pool": "green"})

    total, pending = describe(client, Filters=[{"Name": "instance-state", "Values": ["PENDING"]}])
    assert (total, ids_of(pending)) == (5, set(blue + green))
    total, found = describe(client, Filters=[tag_filter("pool", "blue")])
    assert (total, ids_of(found)) == (3, set(blue))
    total, found = describe(client, Filters=[{"Name": "tag-key", "Values": ["team"]}])
    assert (total, ids_of(found)) == (3, set(blue))

    wait_until(lambda: _all_running(client, blue + green), "5 instances RUNNING")
    running_green = [
        tag_filter("pool", "green"),
        {"Name": "instance-state", "Values": ["RUNNING"]},
    ]
    total, found = describe(client, Filters=running_green)
    assert (total, ids_of(found)) == (2, set(green))
    total, found = describe(client, Filters=[{"Name": "instance-state", "Values": ["PENDING"]}])
    assert (total, found) == (0, [])


def test_describe_filters_by_zone_charge_type_and_instance_type(
    emulator: EmulatorProcess,
) -> None:
    client = emulator.cvm()
    here = run_spot(client, count=2, zone=ZONE)
    there = run_spot(client, count=1, zone=OTHER_ZONE, instance_type="S5.LARGE8")

    total, found = describe(client, Filters=[{"Name": "zone", "Values": [OTHER_ZONE]}])
    assert (total, ids_of(found)) == (1, set(there))
    total, found = describe(client, Filters=[{"Name": "instance-type", "Values": [INSTANCE_TYPE]}])
    assert (total, ids_of(found)) == (2, set(here))
    spot = [{"Name": "instance-charge-type", "Values": ["SPOTPAID"]}]
    assert describe(client, Filters=spot)[0] == 3
    on_demand = [{"Name": "instance-charge-type", "Values": ["POSTPAID_BY_HOUR"]}]
    assert describe(client, Filters=on_demand)[0] == 0


def test_paging_with_limit_one_walks_every_instance_once(emulator: EmulatorProcess) -> None:
    client = emulator.cvm()
    ids = run_spot(client, count=3)

    seen: list[str] = []
    for offset in range(3):
        total, page = describe(client, Offset=offset, Limit=1)
        assert total == 3
        assert len(page) == 1
        seen.append(str(page[0]["InstanceId"]))
    assert sorted(seen) == sorted(ids)  # every page a different instance, none left out
    assert describe(client, Offset=3, Limit=1) == (3, [])


def test_same_client_token_returns_the_same_instances(emulator: EmulatorProcess) -> None:
    client = emulator.cvm()
    first = run_spot(client, count=3, client_token="pool-blue-generation-1")
    again = run_spot(client, count=3, client_token="pool-blue-generation-1")

    assert again == first
    assert describe(client)[0] == 3
    assert len(emulator.all_instances()) == 3
    other = run_spot(client, count=1, client_token="pool-blue-generation-2")
    assert not set(other) & set(first)
    assert describe(client)[0] == 4


def test_terminated_instance_is_terminating_then_leaves_describe_instances(
    start: StartEmulator,
) -> None:
    emulator = start(boot_seconds=2)  # room to see TERMINATING on a loaded machine
    client = emulator.cvm()
    ids = run_spot(client, count=3)
    doomed, *kept = ids

    request = _instance_ids_request("TerminateInstancesRequest", [doomed])
    client.TerminateInstances(request)

    assert _states(client, [doomed]) == {doomed: "TERMINATING"}
    wait_until(lambda: doomed not in _live_ids(client), f"{doomed} to leave DescribeInstances")
    assert _live_ids(client) == set(kept)
    assert describe(client, InstanceIds=[doomed]) == (0, [])
    gone = {i["InstanceId"]: i for i in emulator.all_instances()}[doomed]
    assert gone["GoneReason"] == "terminated"
    again = _instance_ids_request("TerminateInstancesRequest", [doomed])
    assert error_code(lambda: client.TerminateInstances(again)) == "InvalidInstanceId.NotFound"


def test_reclaim_through_the_admin_route_takes_one_instance_only(
    emulator: EmulatorProcess,
) -> None:
    client = emulator.cvm()
    ids = run_spot(client, count=3)
    wait_until(lambda: _all_running(client, ids), "3 instances RUNNING")
    victim, *survivors = ids

    reply = emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [victim]})

    assert reply == {"Reclaimed": [victim]}
    wait_until(lambda: victim not in _live_ids(client), f"{victim} to leave DescribeInstances")
    assert _states(client, survivors) == dict.fromkeys(survivors, "RUNNING")
    gone = {i["InstanceId"]: i for i in emulator.all_instances()}[victim]
    assert gone["GoneReason"] == "reclaimed"
    assert gone["SpotTerminationTime"]
    status, reply = emulator.admin("POST", "/_emulator/reclaim", {"Count": 5})
    assert status == 409, reply  # two live spot instances cannot give five
    assert _states(client, survivors) == dict.fromkeys(survivors, "RUNNING")


def test_reclaim_through_the_cli_by_count_and_zone_and_by_id(emulator: EmulatorProcess) -> None:
    client = emulator.cvm()
    here = run_spot(client, count=2, zone=ZONE)
    there = run_spot(client, count=2, zone=OTHER_ZONE)
    wait_until(lambda: _all_running(client, here + there), "4 instances RUNNING")

    by_count = _reclaim_cli(emulator, "--count", "1", "--zone", OTHER_ZONE)
    assert len(by_count) == 1
    assert by_count[0] in there
    by_id = _reclaim_cli(emulator, "--instance-id", here[0])
    assert by_id == [here[0]]

    reclaimed = {by_count[0], here[0]}
    wait_until(lambda: not reclaimed & _live_ids(client), "reclaimed instances to disappear")
    assert _live_ids(client) == set(here + there) - reclaimed


def test_random_reclaims_take_spot_instances_and_spare_on_demand_ones(
    start: StartEmulator,
) -> None:
    emulator = start(boot_seconds=0.2, reclaim_rate=3_600_000)  # every spot one, within a second
    client = emulator.cvm()
    spot = run_spot(client, count=2)
    on_demand = client.call_json(
        "RunInstances",
        {"Placement": {"Zone": ZONE}, "ImageId": IMAGE_ID, "InstanceType": INSTANCE_TYPE},
    )["Response"]["InstanceIdSet"]

    wait_until(lambda: _live_ids(client) == set(on_demand), "the spot instances to be reclaimed")
    reasons = {i["InstanceId"]: i["GoneReason"] for i in emulator.all_instances()}
    assert reasons == {**dict.fromkeys(spot, "reclaimed"), on_demand[0]: None}
    assert "admin=random-reclaim" in emulator.log_text()


def test_restarted_emulator_still_has_its_instances(start: StartEmulator) -> None:
    first = start()
    client = first.cvm()
    ids = run_spot(client, count=3, client_token="before-restart")
    before = wait_until(lambda: _all_running(client, ids), "3 instances RUNNING")
    first.stop()

    second = start(state=first.state)
    client = second.cvm()
    total, after = describe(client)

    assert total == 3
    assert ids_of(after) == set(ids)
    addresses = {i["InstanceId"]: (i["PrivateIpAddresses"], i["PublicIpAddresses"]) for i in after}
    assert addresses == {
        i["InstanceId"]: (i["PrivateIpAddresses"], i["PublicIpAddresses"]) for i in before
    }
    assert {i["InstanceState"] for i in after} == {"RUNNING"}
    assert run_spot(client, count=3, client_token="before-restart") == ids
    assert describe(client)[0] == 3


def test_concurrent_run_instances_all_succeed_with_distinct_ids(
    emulator: EmulatorProcess,
) -> None:
    threads_count, per_call = 8, 2
    created: list[str] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads_count)

    def create() -> None:
        client = emulator.cvm()  # one client per thread, as the SDK's session is per client
        barrier.wait()
        try:
            ids = run_spot(client, count=per_call)
        except BaseException as error:  # reported below, with the others
            with lock:
                failures.append(error)
            return
        with lock:
            created.extend(ids)

    threads = [threading.Thread(target=create) for _ in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert not failures, failures
    assert len(created) == len(set(created)) == threads_count * per_call
    total, instances = describe(emulator.cvm(), Limit=100)
    assert total == threads_count * per_call
    assert ids_of(instances) == set(created)


def test_every_served_action_is_logged(emulator: EmulatorProcess) -> None:
    client = emulator.cvm()
    ids = run_spot(client, count=1)
    describe(client, InstanceIds=ids)

    log = emulator.log_text()
    assert f"action=cvm.RunInstances region={REGION} code=OK" in log
    assert f"action=cvm.DescribeInstances region={REGION} code=OK" in log
    assert emulator.secret_key not in log


def _instance_ids_request(model: str, ids: list[str]) -> Any:
    request = getattr(models, model)()
    request.InstanceIds = ids
    return request


def _reclaim_cli(emulator: EmulatorProcess, *args: str) -> list[str]:
    result = subprocess.run(
        [str(SPOTPOOL), "emulator", "reclaim", "--endpoint", emulator.endpoint, *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_the_fleet_count_is_one_call_and_drops_with_a_reclaim(emulator: EmulatorProcess) -> None:
    """What the fleet probe relies on: one DescribeInstances counts every live instance of all
    pools (tag-key and state filters), and the paged sweep lists them all."""
    client = emulator.cvm()
    for pool in range(3):
        run_spot(client, count=50, tags={TAG_POOL_UID: f"uid-{pool}", TAG_SLOT: "0"})
    run_spot(client, count=2, tags={"pool": "not-spotpool"})
    assert cloud.count_fleet(client) == 150
    listed = cloud.fleet_instances(client)
    assert len(listed) == 150 and {i.pool_uid for i in listed} == {"uid-0", "uid-1", "uid-2"}
    victim = listed[0].instance_id
    wait_until(lambda: _all_running(client, [victim]), f"{victim} RUNNING")
    emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [victim]})
    wait_until(lambda: cloud.count_fleet(client) == 149, "the count to drop by one")
