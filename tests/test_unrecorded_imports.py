"""A slot's instance the state holds as imported stays adopted even when the config the last
run exported does not name it (the run that imported it failed or was killed before the end)."""

from typing import Any

import pytest

from spotpool.api.spec import ChargeType, SpotpoolSpec
from spotpool.api.stackconfig import PoolIdentity, StackConfig
from spotpool.engine.state.stack_state import SLOT_TYPE, carried_over

pytestmark = pytest.mark.unit

URN = "urn:pulumi:a.b::spotpool::spotpool:index:SpotPool$" + SLOT_TYPE + "::b-slot-"


def config(replicas: int = 3) -> StackConfig:
    spec = SpotpoolSpec.model_validate(
        {
            "region": "ap-singapore",
            "availabilityZones": ["ap-singapore-2", "ap-singapore-3"],
            "instanceTypes": ["GN7.2XLARGE32", "GN7.5XLARGE80"],
            "maximum": 5,
            "replicas": replicas,
            "imageId": "img-abc",
            "credentialsSecretRef": {"name": "c"},
        }
    )
    return StackConfig.from_spec(PoolIdentity(namespace="a", name="b", uid="u"), spec)


def instance(slot: int, instance_id: str, imported: bool, **inputs: Any) -> dict[str, Any]:
    """A slot's resource as the state records it: an import leaves `hostname` unset."""
    where = {
        "availabilityZone": "ap-singapore-3",
        "instanceType": "GN7.5XLARGE80",
        "instanceChargeType": "POSTPAID_BY_HOUR",
        **inputs,
    }
    return {
        "urn": f"{URN}{slot}",
        "type": SLOT_TYPE,
        "id": instance_id,
        "inputs": where if imported else {**where, "hostname": f"b-{slot}"},
    }


def state(*resources: dict[str, Any], exported: StackConfig | None = None) -> dict[str, Any]:
    stack: dict[str, Any] = {"type": "pulumi:pulumi:Stack", "urn": "urn:pulumi:a.b::spotpool::x"}
    if exported is not None:
        stack["outputs"] = {"config": exported.model_dump(mode="json", by_alias=True)}
    return {"resources": [stack, *resources]}


def test_an_unrecorded_import_is_adopted_where_it_is() -> None:
    held = state(instance(0, "ins-made", imported=False), instance(1, "ins-fast", imported=True))
    kept = carried_over(config(), held, {0: "ins-made", 1: "ins-fast"})
    assert kept.adopted == {1: "ins-fast"}  # the created one is not
    assert (kept.zone_of(1), kept.type_of(1), kept.charge_of(1)) == (
        "ap-singapore-3", "GN7.5XLARGE80", ChargeType.POSTPAID_BY_HOUR,
    )  # fmt: skip
    assert (kept.type_of(0), kept.charge_of(0)) == ("GN7.2XLARGE32", ChargeType.SPOTPAID)


def test_a_recorded_adoption_or_a_slot_beyond_the_pool_is_left_as_it_is() -> None:
    recorded = config().adopting({1: ("ins-fast", "GN7.2XLARGE32")})
    held = state(
        instance(1, "ins-fast", imported=True, instanceType="GN7.2XLARGE32"),
        instance(3, "ins-extra", imported=True),
        exported=recorded,
    )
    kept = carried_over(config(), held, {1: "ins-fast", 3: "ins-extra"})
    assert kept.adopted == {1: "ins-fast"}
    assert kept.slot_types == {} and kept.slot_zones == {}  # as the exported config had it


def test_an_import_placed_where_the_spec_no_longer_allows_keeps_only_its_adoption() -> None:
    held = state(instance(1, "ins-old", imported=True, instanceType="S5.LARGE8"))
    kept = carried_over(config(), held, {1: "ins-old"})
    assert kept.adopted == {1: "ins-old"}
    assert kept.type_of(1) == "GN7.2XLARGE32"  # a type the spec dropped: replaced as any slot
