"""The stack program under Pulumi's in-process mocks: fast checks of what it declares.

The real engine, provider and emulator are the integration tier; these only check the
program's own logic (slots, spot settings, tags, outputs) without any cloud.
"""

import asyncio
import json
import runpy
import sys
from pathlib import Path
from typing import Any

import pulumi
import pytest

from spotpool.api.spec import ChargeType, SpotpoolSpec
from spotpool.api.stackconfig import CONFIG_KEY, PoolIdentity, StackConfig

pytestmark = pytest.mark.unit

PROGRAM = Path(__file__).parents[1] / "stacks" / "spotpool"
INSTANCE = "tencentcloud:Instance/instance:Instance"


class CloudMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.instances: dict[str, dict[str, Any]] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        if args.typ != INSTANCE:
            return f"{args.name}-id", dict(args.inputs)
        n = int(args.name.rsplit("-", 1)[1])  # registration order is not slot order
        self.instances[args.name] = dict(args.inputs)
        outputs = {
            **args.inputs,
            "publicIp": f"43.0.0.{n}",
            "privateIp": f"10.0.0.{n}",
            "instanceStatus": "RUNNING",
        }
        return f"ins-mock{n}", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
        return {}, []


def stack_config(**changes: object) -> StackConfig:
    spec = {
        "region": "ap-singapore",
        "availabilityZones": ["ap-singapore-2", "ap-singapore-3"],
        "instanceType": "GN7.2XLARGE32",
        "minimum": 1,
        "maximum": 5,
        "replicas": 3,
        "imageId": "img-abc",
        "securityGroupIds": ["sg-1"],
        "credentialsSecretRef": {"name": "c"},
        "spotMaxPrice": "1.25",
        "tags": {"team": "ml"},
        **changes,
    }
    return StackConfig.from_spec(
        PoolIdentity(namespace="team-a", name="gpu", uid="u-1"), SpotpoolSpec.model_validate(spec)
    )


@pytest.fixture
def mocks(pulumi_event_loop: asyncio.AbstractEventLoop) -> CloudMocks:
    mocks = CloudMocks()
    pulumi.runtime.set_mocks(mocks, project="spotpool", stack="team-a.gpu", preview=False)
    return mocks


def run_program(config: StackConfig, **engine_keys: str) -> pulumi.Output[Any]:
    pulumi.runtime.set_all_config(
        {k: v for k, v in config.to_pulumi_config().items() if k == CONFIG_KEY}
        | {f"spotpool:{key}": value for key, value in engine_keys.items()}
    )
    sys.path.insert(0, str(PROGRAM))
    try:
        namespace = runpy.run_path(str(PROGRAM / "program.py"))
        pool = namespace["main"]()
    finally:
        sys.path.remove(str(PROGRAM))
    output: pulumi.Output[Any] = pool.outputs
    return output


@pulumi.runtime.test
def test_one_spot_instance_per_slot_spread_over_zones(mocks: CloudMocks) -> pulumi.Output[Any]:
    def check(instances: list[dict[str, Any]]) -> None:
        assert sorted(mocks.instances) == ["gpu-slot-0", "gpu-slot-1", "gpu-slot-2"]
        zones = [mocks.instances[f"gpu-slot-{i}"]["availabilityZone"] for i in range(3)]
        assert zones == ["ap-singapore-2", "ap-singapore-3", "ap-singapore-2"]
        first = mocks.instances["gpu-slot-0"]
        assert first["instanceChargeType"] == "SPOTPAID"
        assert first["spotInstanceType"] == "ONE-TIME" and first["spotMaxPrice"] == "1.25"
        assert first["tags"] == {
            "team": "ml",
            "spotpool-pool-uid": "u-1",
            "spotpool-pool": "team-a/gpu",
            "spotpool-slot": "0",
        }
        assert "vpcId" not in first  # DEFAULT: left to the provider's default VPC
        assert "password" not in first  # no built-in password, ever
        assert [i["slot"] for i in instances] == [0, 1, 2]
        assert instances[1]["instanceId"] == "ins-mock1"
        assert instances[1]["publicIp"] == "43.0.0.1" and instances[1]["state"] == "RUNNING"

    return run_program(stack_config()).apply(check)


@pulumi.runtime.test
def test_every_instance_carries_the_install_and_the_cluster(
    mocks: CloudMocks,
) -> pulumi.Output[Any]:
    def check(instances: list[dict[str, Any]]) -> None:
        for name in ("gpu-slot-0", "gpu-slot-1", "gpu-slot-2"):
            tags = mocks.instances[name]["tags"]
            # marked: the release before the cluster tag (install tag alone) never matches it
            assert tags["spotpool-install"] == "ops.spotpool-operator/v2"
            assert tags["spotpool-cluster"] == "5d1c2b9e-kube-system-uid"

    config = stack_config()
    return run_program(
        config, installId="ops.spotpool-operator", clusterId="5d1c2b9e-kube-system-uid"
    ).apply(check)


@pulumi.runtime.test
def test_on_demand_pools_carry_no_spot_options(mocks: CloudMocks) -> pulumi.Output[Any]:
    def check(_: object) -> None:
        first = mocks.instances["gpu-slot-0"]
        assert first["instanceChargeType"] == "POSTPAID_BY_HOUR"
        assert "spotInstanceType" not in first and "spotMaxPrice" not in first

    return run_program(stack_config(instanceChargeType="POSTPAID_BY_HOUR")).apply(check)


@pulumi.runtime.test
def test_placed_slots_go_to_their_zone_type_and_charge(mocks: CloudMocks) -> pulumi.Output[Any]:
    config = stack_config(instanceTypes=["GN7.2XLARGE32", "GN7.5XLARGE80"]).placing(
        {
            0: ("ap-singapore-3", "GN7.5XLARGE80", ChargeType.SPOTPAID),
            2: ("ap-singapore-3", "GN7.2XLARGE32", ChargeType.POSTPAID_BY_HOUR),
        }
    )

    def check(instances: list[dict[str, Any]]) -> None:
        slots = [mocks.instances[f"gpu-slot-{i}"] for i in range(3)]
        assert [s["availabilityZone"] for s in slots] == ["ap-singapore-3"] * 3
        assert [s["instanceType"] for s in slots] == [
            "GN7.5XLARGE80",
            "GN7.2XLARGE32",
            "GN7.2XLARGE32",
        ]
        assert slots[0]["instanceChargeType"] == "SPOTPAID"
        on_demand = slots[2]
        assert on_demand["instanceChargeType"] == "POSTPAID_BY_HOUR"
        assert "spotInstanceType" not in on_demand and "spotMaxPrice" not in on_demand
        assert [i["chargeType"] for i in instances] == ["SPOTPAID", "SPOTPAID", "POSTPAID_BY_HOUR"]

    assert config.on_demand_slots() == [2]
    return run_program(config).apply(check)


def test_stack_config_holds_no_credentials() -> None:
    config = stack_config(credentialsSecretRef=None, secretId="AKIDsecret", secretKey="shh")
    rendered = json.dumps(config.to_pulumi_config())
    assert "AKIDsecret" not in rendered and "shh" not in rendered
    assert config.pool.stack_name == "team-a.gpu"


@pulumi.runtime.test
def test_the_complete_launch_spec_reaches_each_instance(mocks: CloudMocks) -> pulumi.Output[Any]:
    config = stack_config(
        instanceTypes=["GN7.2XLARGE32", "GN7.5XLARGE80"],
        instanceType=None,
        vpcId="vpc-a1",
        subnetIds={"ap-singapore-2": "subnet-z2", "ap-singapore-3": "subnet-z3"},
        imageIds={"GN7.5XLARGE80": "img-big"},
        dataDisks=[{"type": "CLOUD_SSD", "size": 200, "deleteWithInstance": False}],
        camRoleName="gpu-trainer",
        placementGroupId="ps-abc1",
    ).placing({2: ("ap-singapore-2", "GN7.5XLARGE80", ChargeType.SPOTPAID)})

    def check(_: object) -> None:
        slots = [mocks.instances[f"gpu-slot-{i}"] for i in range(3)]
        assert [s["subnetId"] for s in slots] == ["subnet-z2", "subnet-z3", "subnet-z2"]
        assert [s["imageId"] for s in slots] == ["img-abc", "img-abc", "img-big"]
        for s in slots:
            assert s["dataDisks"] == [
                {"dataDiskType": "CLOUD_SSD", "dataDiskSize": 200, "deleteWithInstance": False}
            ]
            assert s["camRoleName"] == "gpu-trainer" and s["placementGroupId"] == "ps-abc1"

    return run_program(config).apply(check)


class ImportMocks(CloudMocks):
    """CloudMocks that also note which resources were imported (the id they were given)."""

    def __init__(self) -> None:
        super().__init__()
        self.imported: dict[str, str | None] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        if args.typ != INSTANCE:
            return f"{args.name}-id", dict(args.inputs)
        self.imported[args.name] = args.resource_id or None
        name = args.name.removesuffix("-surge")
        n = int(name.rsplit("-", 1)[1]) + (50 if name != args.name else 0)
        self.instances[args.name] = dict(args.inputs)
        return f"ins-mock{n}", {**args.inputs, "instanceStatus": "RUNNING"}


@pytest.fixture
def import_mocks(pulumi_event_loop: asyncio.AbstractEventLoop) -> ImportMocks:
    mocks = ImportMocks()
    pulumi.runtime.set_mocks(mocks, project="spotpool", stack="team-a.gpu", preview=False)
    return mocks


@pulumi.runtime.test
def test_a_surge_beside_an_adopted_instance_is_a_new_instance(
    import_mocks: ImportMocks,
) -> pulumi.Output[Any]:
    """Slot 0 holds an adopted instance (a storm's fast-path launch, a killed run's create); a
    notice's surge beside it must be created, never the slot's own instance imported again."""

    def check(_: object) -> None:
        assert import_mocks.imported["gpu-slot-0"] == "ins-adopted"
        assert import_mocks.imported["gpu-slot-0-surge"] is None

    config = stack_config().adopting({0: ("ins-adopted", "GN7.2XLARGE32")})
    return run_program(config, surge=json.dumps([0])).apply(check)
