"""The complete launch spec for real (real Pulumi, the tencentcloud provider, the emulator as the
cloud): a two-zone pool lands each instance in its zone's subnet, with the data disks, the CAM
role, the placement group and the image of its instance type; the provider reads all of it back,
so a refresh and a second preview change nothing."""

import pytest

from tests.engine.conftest import EngineWorld

pytestmark = pytest.mark.integration
SUBNETS = {"ap-singapore-2": "subnet-gpu2", "ap-singapore-3": "subnet-gpu3"}
DISKS = [
    {"type": "CLOUD_SSD", "size": 200, "deleteWithInstance": False},
    {"type": "CLOUD_PREMIUM", "size": 50},
]
LAUNCH_SPEC: dict[str, object] = {
    "vpcId": "vpc-gpu1",
    "subnetIds": SUBNETS,
    "dataDisks": DISKS,
    "camRoleName": "gpu-trainer",
    "placementGroupId": "ps-gpu1",
    "imageIds": {"GN7.2XLARGE32": "img-22trbn9x"},  # the pool's imageId is img-eb30mz89
}


def test_a_two_zone_pool_launches_with_its_complete_spec_and_previews_no_change(
    world: EngineWorld,
) -> None:
    stack = world.pool()
    config = world.config(stack, 4, **LAUNCH_SPEC)

    done = stack.up(config)

    assert done.changes.create == 6  # the stack, the component and 4 instances
    ours = {i.instance_id for i in done.instances}
    seen = [i for i in world.emulator.all_instances() if i["InstanceId"] in ours]
    assert len(seen) == 4
    assert sorted(i["Zone"] for i in seen) == ["ap-singapore-2"] * 2 + ["ap-singapore-3"] * 2
    for instance in seen:
        assert instance["VirtualPrivateCloud"]["VpcId"] == "vpc-gpu1"
        assert instance["VirtualPrivateCloud"]["SubnetId"] == SUBNETS[instance["Zone"]]
        assert instance["ImageId"] == "img-22trbn9x"
        assert instance["CamRoleName"] == "gpu-trainer"
        assert instance["DisasterRecoverGroupId"] == "ps-gpu1"
        disks = [
            (d["DiskType"], d["DiskSize"], d["DeleteWithInstance"]) for d in instance["DataDisks"]
        ]
        assert disks == [("CLOUD_SSD", 200, False), ("CLOUD_PREMIUM", 50, True)]
        assert all(d["DiskId"].startswith("disk-") for d in instance["DataDisks"])

    refreshed = stack.refresh()  # the provider reads every field back from the cloud
    assert refreshed.gone_slots == [] and not refreshed.changes.update
    again = stack.preview(config)
    changed = again.changes.model_dump(exclude={"same"})
    assert not any(changed.values()), (changed, again.diff)
    assert again.changes.same >= 4

    # One field changed shows as that change (ForceNew in the provider: a replacement).
    moved = world.config(stack, 4, **{**LAUNCH_SPEC, "camRoleName": "gpu-trainer-2"})
    shown = stack.preview(moved)
    assert shown.changes.replace == 4, shown.changes
    assert "gpu-trainer-2" in (shown.diff or "")
