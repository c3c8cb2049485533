"""Per-slot config: instance-type fallbacks and adopted instances, and which of them are kept."""

import pytest

from spotpool.api.spec import ChargeType, SpotpoolSpec
from spotpool.api.stackconfig import PoolIdentity, StackConfig

pytestmark = pytest.mark.unit


def config(replicas: int = 3) -> StackConfig:
    spec = SpotpoolSpec.model_validate(
        {
            "region": "ap-singapore",
            "availabilityZone": "ap-singapore-2",
            "instanceTypes": ["GN7.2XLARGE32", "GN7.5XLARGE80"],
            "maximum": 5,
            "replicas": replicas,
            "imageId": "img-abc",
            "credentialsSecretRef": {"name": "c"},
        }
    )
    return StackConfig.from_spec(PoolIdentity(namespace="a", name="b", uid="u"), spec)


def test_a_slot_falls_back_once_then_has_nothing_left() -> None:
    moved = config().falling_back([2])
    assert moved is not None
    assert [moved.type_of(s) for s in range(3)] == ["GN7.2XLARGE32"] * 2 + ["GN7.5XLARGE80"]
    assert moved.falling_back([2]) is None


def test_only_live_slots_within_the_pool_keep_their_fallback() -> None:
    previous = config(4).model_copy(update={"slot_types": {1: "GN7.5XLARGE80", 3: "GN7.5XLARGE80"}})
    kept = config(3).keeping_fallbacks(previous, live_slots={0, 3})
    assert kept.slot_types == {}  # slot 1 is gone (recreated on the first type), 3 is beyond N
    assert config(3).keeping_fallbacks(previous, live_slots={1}).slot_types == {1: "GN7.5XLARGE80"}


def test_an_adopted_instance_keeps_its_type_and_its_slot_while_it_lives() -> None:
    adopted = config().adopting({1: ("ins-a", "GN7.5XLARGE80"), 2: ("ins-b", "GN7.2XLARGE32")})
    assert adopted.adopted == {1: "ins-a", 2: "ins-b"}
    assert adopted.type_of(1) == "GN7.5XLARGE80" and adopted.type_of(2) == "GN7.2XLARGE32"
    # Next up: slot 1 still holds ins-a; slot 2 was reclaimed and recreated as ins-c.
    kept = config().keeping_adopted(adopted, live={1: "ins-a", 2: "ins-c"})
    assert kept.adopted == {1: "ins-a"}
    assert config(1).keeping_adopted(adopted, live={1: "ins-a"}).adopted == {}  # scaled away


def test_each_slot_gets_its_zones_subnet_and_its_types_image() -> None:
    spec = SpotpoolSpec.model_validate(
        {
            "region": "ap-singapore",
            "availabilityZones": ["ap-singapore-2", "ap-singapore-3", "ap-singapore-4"],
            "instanceTypes": ["GN7.2XLARGE32", "GN7.5XLARGE80"],
            "maximum": 5,
            "replicas": 3,
            "imageId": "img-abc",
            "imageIds": {"GN7.5XLARGE80": "img-big"},
            "vpcId": "vpc-a1",
            "subnetIds": {"ap-singapore-2": "subnet-z2", "ap-singapore-3": "subnet-z3"},
            "credentialsSecretRef": {"name": "c"},
        }
    )
    placed = StackConfig.from_spec(PoolIdentity(namespace="a", name="b", uid="u"), spec).placing(
        {0: ("ap-singapore-3", "GN7.5XLARGE80", ChargeType.SPOTPAID)}
    )
    assert [placed.subnet_of(s) for s in range(3)] == ["subnet-z3", "subnet-z3", "DEFAULT"]
    assert [placed.image_of(s) for s in range(3)] == ["img-big", "img-abc", "img-abc"]
