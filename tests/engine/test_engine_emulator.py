"""The engine for real: pulumi CLI, the tencentcloud plugin and the emulator as the cloud."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from pydantic import SecretStr

from spotpool.api.stackconfig import TAG_INSTALL
from spotpool.engine.basics.results import OperationKind
from spotpool.engine.basics.settings import EngineSettings
from spotpool.engine.fencing.processes import pulumi_runs
from spotpool.engine.stacks.stack import EngineError, OperationTimeout, PoolStack
from spotpool.engine.state.backend_files import open_backend
from spotpool.engine.tencent import cloud
from spotpool.engine.tencent.credentials import Credentials
from tests.conftest import require_tool
from tests.emulator.harness import SECRET_ID, SECRET_KEY, run_spot, start_emulator, wait_until
from tests.engine._support.killed_up import KILLED_UP
from tests.engine.conftest import REGION, EngineWorld

pytestmark = pytest.mark.integration


def _ids_by_slot(instances: list) -> dict[int, str]:  # type: ignore[type-arg]
    return {item.slot: item.instance_id for item in instances}


def test_up_creates_spot_instances_and_outputs_match(world: EngineWorld) -> None:
    stack = world.pool()
    result = stack.up(world.config(stack, 3))

    assert result.kind == OperationKind.UP
    assert result.changes.create >= 3
    cloud = world.cloud_instances(stack)
    assert sorted(cloud) == sorted(i.instance_id for i in result.instances)
    assert set(cloud.values()) == {"RUNNING"}
    assert [i.slot for i in result.instances] == [0, 1, 2]
    assert [i.zone for i in result.instances] == [
        "ap-singapore-2",
        "ap-singapore-3",
        "ap-singapore-2",
    ]
    described = {i["InstanceId"]: i for i in world.emulator.all_instances()}
    assert {described[i]["InstanceChargeType"] for i in cloud} == {"SPOTPAID"}
    assert all(i.private_ip for i in result.instances)


def test_reclaimed_slot_is_found_by_refresh_and_recreated_alone(world: EngineWorld) -> None:
    stack = world.pool()
    first = _ids_by_slot(stack.up(world.config(stack, 3)).instances)

    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [first[1]]})
    wait_until(lambda: first[1] not in world.cloud_instances(stack), "the reclaim", timeout=30)

    refreshed = stack.refresh()
    assert refreshed.gone_slots == [1]
    again = stack.up(world.config(stack, 3))
    second = _ids_by_slot(again.instances)
    assert again.changes.create == 1
    assert second[0] == first[0] and second[2] == first[2]
    assert second[1] != first[1]
    assert sorted(world.cloud_instances(stack)) == sorted(second.values())


def test_scaling_keeps_the_lowest_slots(world: EngineWorld) -> None:
    stack = world.pool()
    three = _ids_by_slot(stack.up(world.config(stack, 3)).instances)
    five = _ids_by_slot(stack.up(world.config(stack, 5)).instances)
    assert {s: five[s] for s in range(3)} == three
    two = _ids_by_slot(stack.up(world.config(stack, 2)).instances)
    assert two == {0: three[0], 1: three[1]}
    assert sorted(world.cloud_instances(stack)) == sorted(two.values())


def test_destroy_leaves_no_instance_and_no_stack(world: EngineWorld) -> None:
    stack = world.pool()
    stack.up(world.config(stack, 2))
    assert stack.refresh().gone_slots == []
    stack.destroy()
    served = world.emulator.log_text()
    for action in (
        "cvm.RunInstances",
        "cvm.DescribeInstances",
        "cvm.TerminateInstances",
        "tag.ModifyResourceTags",
        "tag.DescribeResourceTagsByResourceIds",
    ):
        assert f"action={action} region=ap-singapore code=OK" in served
    assert world.cloud_instances(stack) == {}
    stacks_dir = Path(world.settings.backend_url.removeprefix("file://")) / ".pulumi" / "stacks"
    assert not list(stacks_dir.glob(f"**/{stack.name}.json"))  # only the .bak copy is kept


def test_credentials_never_reach_config_or_state(world: EngineWorld) -> None:
    stack = world.pool()
    user_data = "#!/bin/sh\nexport HF_TOKEN=hf-user-data-token-4711\n"
    config = world.config(stack, 1, userData=user_data)
    stack.up(config, login_password="Sp0tpool-Login-Password")
    diff = stack.preview(world.config(stack, 2, userData=user_data)).diff or ""
    env = {**os.environ, **stack.run_env()}
    exported = subprocess.run(
        [str(world.settings.tools_dir / "pulumi"), "stack", "export", "--stack", stack.name],
        cwd=world.settings.work_root / stack.name,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    files = [exported, diff] + [
        p.read_text() for p in (world.settings.work_root / stack.name).glob("Pulumi.*.yaml")
    ]
    for text in files:
        for secret in (SECRET_ID, SECRET_KEY, "Sp0tpool-Login-Password", "hf-user-data-token"):
            assert secret not in text
    assert json.loads(exported)["deployment"]["resources"]
    assert "hf-user-data-token" not in " ".join(world.progress)
    assert stack.applied_config() == config.redacted()  # a restart compares fingerprints


def test_killed_up_is_recovered_without_leaks_or_stuck_lock(world: EngineWorld) -> None:
    _killed_up_is_recovered(world)


def test_killed_up_is_recovered_on_an_s3_backend(s3_world: EngineWorld) -> None:
    _killed_up_is_recovered(s3_world)


def test_up_reclaim_replace_and_destroy_on_an_s3_backend(s3_world: EngineWorld) -> None:
    world = s3_world
    stack = world.pool()
    config = world.config(stack, 2)
    first = _ids_by_slot(stack.up(config).instances)
    assert stack.applied_config() == config.redacted()  # read from the bucket's checkpoint
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [first[0]]})
    wait_until(lambda: first[0] not in world.cloud_instances(stack), "the reclaim", timeout=30)
    after = _ids_by_slot(stack.replace_slots(config, [0]).instances)
    assert after[1] == first[1] and after[0] != first[0]
    assert sorted(world.cloud_instances(stack)) == sorted(after.values())
    files = open_backend(world.settings.backend_url)
    assert files is not None and files.keys(".pulumi/stacks/")  # the state is in the bucket
    stack.destroy()
    assert world.cloud_instances(stack) == {}
    assert not [k for k in files.keys(".pulumi/") if f"/{stack.name}" in k and "/locks/" in k]


def _killed_up_is_recovered(world: EngineWorld) -> None:
    stack = world.pool()
    # Slow the provider's wait for RUNNING, so that the kill lands mid-run however fast the
    # engine is (an up that ends before the kill leaves nothing to recover).
    slow = {"Service": "cvm", "Action": "DescribeInstances", "Rate": 0.0, "LatencyMs": 1500}
    world.emulator.admin_ok("POST", "/_emulator/faults", slow)
    settings_json = world.settings.model_dump_json()
    settings_json = json.dumps(
        {**json.loads(settings_json), "passphrase": "engine-tests-passphrase"}
    )
    run = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILLED_UP,
            settings_json,
            stack.pool.model_dump_json(),
            SECRET_ID,
            SECRET_KEY,
        ],
        cwd=Path(__file__).parents[2],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    wait_until(lambda: world.cloud_instances(stack), "the first instance", timeout=120)
    # The whole tree dies at once, as with its pod: the plugins are in process groups of their
    # own (engine/fencing/processes.py), so killing the run's group would leave them running for
    # good.
    tree = [psutil.Process(run.pid), *psutil.Process(run.pid).children(recursive=True)]
    for process in tree:
        process.kill()
    run.wait(timeout=30)
    psutil.wait_procs(tree, timeout=10)
    time.sleep(0.5)
    made_before_the_kill = set(world.cloud_instances(stack))
    world.emulator.admin_ok("DELETE", "/_emulator/faults")

    result = stack.up(world.config(stack, 4))

    assert result.recovered, "the killed run left nothing to repair?"
    ids = sorted(i.instance_id for i in result.instances)
    assert len(ids) == 4
    assert sorted(world.cloud_instances(stack)) == ids
    assert made_before_the_kill <= set(ids), "an instance the killed run made was wasted"
    assert any("removed the lock" in note for note in result.recovered), result.recovered
    files = open_backend(world.settings.backend_url)
    assert files is not None
    assert not [key for key in files.keys(".pulumi/locks/") if f"/{stack.name}/" in key]


def test_refresh_terminates_instances_tagged_for_the_pool_but_not_in_its_state(
    world: EngineWorld,
) -> None:
    stack = world.pool()
    owned = _ids_by_slot(stack.up(world.config(stack, 1)).instances)
    config = world.config(stack, 1)
    client = cloud.cvm(world.credentials, REGION, world.emulator.endpoint)
    stray = run_spot(
        client,
        count=1,
        zone="ap-singapore-2",
        instance_type="GN7.2XLARGE32",
        tags={**config.instance_tags(5), TAG_INSTALL: "default"},
        ImageId="img-eb30mz89",
    )
    assert set(stray) <= set(world.cloud_instances(stack))

    result = stack.refresh()

    assert any(stray[0] in note for note in result.recovered)
    wait_until(lambda: set(world.cloud_instances(stack)) == {owned[0]}, "the stray's end", 30)


def test_another_writers_young_instance_and_another_installs_are_left_alone(
    world: EngineWorld,
) -> None:
    """A second writer's create in flight (tagged for the pool, young, not in this state) and
    an instance of another install sharing the account are never terminated."""
    stack = world.pool()
    stack.up(world.config(stack, 1))
    config = world.config(stack, 1)
    client = cloud.cvm(world.credentials, REGION, world.emulator.endpoint)
    spot = {"zone": "ap-singapore-2", "instance_type": "GN7.2XLARGE32", "ImageId": "img-eb30mz89"}
    in_flight = run_spot(client, count=1, tags={**config.instance_tags(4), TAG_INSTALL: "default"},
                         **spot)  # fmt: skip
    other = run_spot(client, count=1, tags={**config.instance_tags(5), TAG_INSTALL: "staging"},
                     **spot)  # fmt: skip
    careful = world.settings.model_copy(update={"orphan_min_age": 900.0})
    stack = PoolStack(stack.pool, careful, world.credentials, REGION)

    result = stack.refresh()
    stack.up(world.config(stack, 1))

    assert {*in_flight, *other} <= set(world.cloud_instances(stack))
    notes = " ".join(result.recovered)
    assert f"left orphaned instance {in_flight[0]} alone: young" in notes
    assert f"left orphaned instance {other[0]} alone: made by another install" in notes


def test_a_checkpoint_whose_metadata_a_kill_left_empty_is_mended(world: EngineWorld) -> None:
    stack = world.pool()
    first = _ids_by_slot(stack.up(world.config(stack, 1)).instances)
    backend = Path(world.settings.backend_url.removeprefix("file://"))
    (attrs,) = backend.glob(f".pulumi/stacks/**/{stack.name}.json.gz.attrs")
    attrs.write_text("")  # as a SIGKILL between its create and its write leaves it

    result = stack.up(world.config(stack, 1))

    assert any("half-written" in note for note in result.recovered)
    assert _ids_by_slot(result.instances) == first


def test_an_instance_the_state_lost_is_adopted_into_its_slot_not_recreated(
    world: EngineWorld,
) -> None:
    stack = world.pool()
    first = _ids_by_slot(stack.up(world.config(stack, 3)).instances)
    world.unrecord(stack, 1)
    served = len(world.emulator.actions())

    result = stack.up(world.config(stack, 3))

    assert _ids_by_slot(result.instances) == first
    assert any(first[1] in note and "adopted" in note for note in result.recovered)
    assert sorted(world.cloud_instances(stack)) == sorted(first.values())
    after = set(world.emulator.actions()[served:])
    # Nothing was created, and nothing was re-set: a hostname change would reinstall it.
    assert not {"cvm.RunInstances", "cvm.ResetInstance", "cvm.ResetInstancesPassword"} & after
    again = stack.up(world.config(stack, 3))
    changed = again.changes.model_dump(exclude={"same"})
    assert not any(changed.values()) and not again.recovered, (changed, again.recovered)
    assert _ids_by_slot(again.instances) == first


def test_refresh_leaves_an_adoptable_orphan_for_the_next_up(world: EngineWorld) -> None:
    stack = world.pool()
    first = _ids_by_slot(stack.up(world.config(stack, 2)).instances)
    world.unrecord(stack, 0)

    refreshed = stack.refresh()

    assert refreshed.orphan_slots == [0]
    assert sorted(world.cloud_instances(stack)) == sorted(first.values())
    assert _ids_by_slot(stack.up(world.config(stack, 2)).instances) == first


def test_an_orphan_no_slot_wants_is_terminated_by_up(world: EngineWorld) -> None:
    stack = world.pool()
    first = _ids_by_slot(stack.up(world.config(stack, 3)).instances)
    world.unrecord(stack, 2)

    result = stack.up(world.config(stack, 2))  # scaled down: slot 2 is not wanted any more

    assert _ids_by_slot(result.instances) == {0: first[0], 1: first[1]}
    assert any(first[2] in note and "terminated" in note for note in result.recovered)
    wait_until(lambda: first[2] not in world.cloud_instances(stack), "the orphan's end", 30)


def test_an_orphan_in_another_zone_than_its_slot_is_terminated_not_adopted(
    world: EngineWorld,
) -> None:
    stack = world.pool()
    first = _ids_by_slot(stack.up(world.config(stack, 2)).instances)  # slot 1: ap-singapore-3
    world.unrecord(stack, 1)

    result = stack.up(world.config(stack, 2, availabilityZones=["ap-singapore-2"]))

    slots = {item.slot: item for item in result.instances}
    assert slots[0].instance_id == first[0]
    assert slots[1].instance_id != first[1] and slots[1].zone == "ap-singapore-2"
    assert any(first[1] in note and "terminated" in note for note in result.recovered)


def test_no_spot_stock_falls_back_to_the_next_instance_type(world: EngineWorld) -> None:
    world.emulator.admin_ok(
        "POST",
        "/_emulator/capacity",
        {"Zone": "ap-singapore-2", "InstanceType": "GN7.2XLARGE32", "Available": 1},
    )
    stack = world.pool()
    config = world.config(stack, 3, instanceTypes=["GN7.2XLARGE32", "GN7.5XLARGE80"])

    first = stack.up(config)

    types = sorted(i.instance_type or "" for i in first.instances)
    assert types == ["GN7.2XLARGE32", "GN7.2XLARGE32", "GN7.5XLARGE80"]
    assert any("no spot stock" in note for note in first.recovered)
    again = stack.up(config)  # the fallback is kept: nothing is replaced
    assert (again.changes.create, again.changes.replace, again.changes.delete) == (0, 0, 0)
    assert len(world.cloud_instances(stack)) == 3


def test_no_stock_and_no_fallback_fails_saying_so_and_creates_nothing_more(
    world: EngineWorld,
) -> None:
    world.emulator.admin_ok(
        "POST",
        "/_emulator/capacity",
        {"Zone": "ap-singapore-2", "InstanceType": "GN7.2XLARGE32", "Available": 0},
    )
    stack = world.pool()
    with pytest.raises(EngineError, match="ResourceInsufficient"):
        stack.up(world.config(stack, 2))
    assert len(world.cloud_instances(stack)) == 1  # slot 1 lives in the zone with stock


def test_an_operation_past_its_timeout_is_killed_with_its_plugins_and_recovered(
    tmp_path: Path,
) -> None:
    """An `up` that hangs (instances that take 10 s to boot, past its 6 s timeout however soon
    it sends RunInstances) is killed at its timeout — the CLI and the provider plugin, nothing
    left running — and the next operation recovers its lock."""
    require_tool("pulumi")
    emulator = start_emulator(tmp_path / "cloud.db", tmp_path / "emulator.log", boot_seconds=10)
    try:
        settings = EngineSettings(
            backend_url=f"file://{tmp_path / 'backend'}",
            passphrase=SecretStr("engine-tests-passphrase"),
            work_root=tmp_path / "workspaces",
            cloud_endpoint=emulator.endpoint,
            operation_timeout=6,
        )
        (tmp_path / "backend").mkdir()
        world = EngineWorld(emulator, settings, Credentials(
            secret_id=SecretStr(SECRET_ID), secret_key=SecretStr(SECRET_KEY)), [])  # fmt: skip
        stack = world.pool()
        with pytest.raises(OperationTimeout, match="ran over 6 s and was killed"):
            stack.up(world.config(stack, 1))
        assert pulumi_runs() == []  # the CLI is gone
        plugins = [p for p in psutil.process_iter(["cmdline"])
                   if "pulumi-resource-tencentcloud" in " ".join(p.info["cmdline"] or [])
                   and f"HTTP_PROXY={emulator.endpoint}" in _environ(p)]  # fmt: skip
        assert plugins == []  # and so is its plugin
        patient = PoolStack(stack.pool, settings.model_copy(update={"operation_timeout": 300}),
                            world.credentials, REGION)  # fmt: skip
        result = patient.up(world.config(stack, 1))
        assert any("removed the lock" in note for note in result.recovered), result.recovered
        assert len(result.instances) == 1
    finally:
        emulator.stop()


def _environ(process: psutil.Process) -> str:
    try:
        return " ".join(f"{k}={v}" for k, v in process.environ().items())
    except psutil.Error:
        return ""


def _cluster_tags(world: EngineWorld, stack: PoolStack) -> set[str | None]:
    found = world.cloud_instances(stack)
    return {
        next((t["Value"] for t in item.get("Tags") or [] if t["Key"] == "spotpool-cluster"), None)
        for item in world.emulator.all_instances()
        if item["InstanceId"] in found
    }


def test_a_stack_taken_over_by_another_cluster_is_retagged_in_place(world: EngineWorld) -> None:
    """A rebuilt cluster (or the first start after the upgrade): the stack's instances carry
    another cluster's tag (or none), so its applied config is not taken as applied; the next up
    tags them with this cluster, in place: no instance launched or replaced. An orphan of the
    old cluster in a free slot is not this cluster's to adopt."""
    world.settings.cluster_id = "c-old"
    stack = world.pool()
    first = _ids_by_slot(stack.up(world.config(stack, 2)).instances)
    assert _cluster_tags(world, stack) == {"c-old"}
    assert stack.applied_config() is not None
    world.unrecord(stack, 1)  # a killed run's create, made under the old cluster

    world.settings.cluster_id = "c-new"
    assert stack.applied_config() is None  # made under another cluster: an up is due
    served = len(world.emulator.actions())
    result = stack.up(world.config(stack, 2))

    ids = _ids_by_slot(result.instances)
    assert ids[0] == first[0] and ids[1] != first[1]  # slot 1's orphan was not adopted
    assert any(first[1] in note and "another cluster (c-old)" in note for note in result.recovered)
    assert first[1] in world.cloud_instances(stack)  # nor terminated: the old cluster's
    tags = {
        i["InstanceId"]: {t["Key"]: t["Value"] for t in i.get("Tags") or []}
        for i in world.emulator.all_instances()
    }
    assert tags[first[0]]["spotpool-cluster"] == "c-new"  # re-tagged in place
    assert tags[ids[1]]["spotpool-cluster"] == "c-new"
    after = world.emulator.actions()[served:]
    assert after.count("cvm.RunInstances") == 1  # slot 1 only; slot 0 kept its instance
    assert stack.applied_config() is not None
