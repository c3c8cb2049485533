"""What a pool's stack state says: its slots' and surges' instances, their URNs, the config of
the last `up`, and the config an `up` derives from them. Pure readings of an exported state
(`state_of` reads one), no CLI run and no write."""

from collections.abc import Mapping
from typing import Any, TypeVar

from pulumi import automation as auto

from spotpool.api.notices import NONCE_TAG
from spotpool.api.spec import ChargeType
from spotpool.api.stackconfig import TAG_CLUSTER, TAG_INSTALL, StackConfig, install_tag
from spotpool.engine.basics.results import SlotOutput
from spotpool.engine.state.lean_stack import LeanStack
from spotpool.engine.state.urns import slot_of_urn, surge_slot_of_urn

SLOT_TYPE = "tencentcloud:Instance/instance:Instance"
T = TypeVar("T")


def state_of(stack: auto.Stack) -> Mapping[str, Any]:
    """The state as the engine reads it (nothing secret): a LeanStack reads a self-managed
    backend's checkpoint file without a CLI run."""
    if isinstance(stack, LeanStack):
        return stack.read_state()
    return stack.export_stack().deployment or {}


def slots_in(state: Mapping[str, Any]) -> dict[int, SlotOutput]:
    """The pool's instances as a stack state records them (what refresh last saw)."""
    slots: dict[int, SlotOutput] = {}
    for resource in state.get("resources") or []:
        slot = slot_of_urn(resource.get("urn", ""))
        if resource.get("type") != SLOT_TYPE or not resource.get("id") or slot is None:
            continue
        out = resource.get("outputs") or {}
        slots[slot] = SlotOutput(
            slot=slot,
            instance_id=resource["id"],
            public_ip=out.get("publicIp") or None,
            private_ip=out.get("privateIp") or None,
            zone=out.get("availabilityZone"),
            instance_type=out.get("instanceType"),
            state=out.get("instanceStatus"),
            nonce=((out.get("tags") or {}).get(NONCE_TAG) or None),
        )
    return slots


def instances_of(outputs: Mapping[str, Any], key: str = "instances") -> list[SlotOutput]:
    """The instances a stack's outputs list under `key` ("instances" or "surges")."""
    value = outputs.get(key)
    raw = value.value if value is not None else None
    return [SlotOutput.model_validate(item) for item in raw or []]


def ids_by_slot(state: Mapping[str, Any]) -> dict[int, str]:
    """slot -> id of its instance, as the state records them."""
    return {slot: item.instance_id for slot, item in slots_in(state).items()}


def urns_by_slot(state: Mapping[str, Any]) -> dict[int, str]:
    """slot -> URN of its instance resource (with or without an instance id yet)."""
    return {
        slot: resource["urn"]
        for resource in state.get("resources") or []
        if resource.get("type") == SLOT_TYPE
        and (slot := slot_of_urn(resource.get("urn", ""))) is not None
    }


def ids_by_surge(state: Mapping[str, Any]) -> dict[int, str]:
    """slot -> id of its surge instance, as the state records them."""
    return {
        slot: resource["id"]
        for resource in state.get("resources") or []
        if resource.get("type") == SLOT_TYPE
        and resource.get("id")
        and (slot := surge_slot_of_urn(resource.get("urn", ""))) is not None
    }


def surge_plan(slots: set[int], surges: set[int], count: int) -> tuple[list[int], list[int]]:
    """Which surge instances an `up` keeps beside their slot's instance, and which it promotes
    into their slot (the slot's own instance left the state: the cloud took it). A surge of a
    slot the pool no longer has goes."""
    keep = sorted(s for s in surges if s in slots and s < count)
    promote = sorted(s for s in surges if s not in slots and s < count)
    return keep, promote


def tagged_for(
    state: Mapping[str, Any], cluster_id: str | None, install_id: str | None = None
) -> bool:
    """Whether every instance the state holds carries this cluster's tag and (given
    `install_id`) this install's value as this release writes it (as the last run set them).
    No cluster id (run by hand): nothing to check. Otherwise one `up` re-tags them: a pool
    moved to another install (operatorClass), instances of an earlier release (the unmarked
    install value, or no cluster tag), a stack taken over by a rebuilt cluster."""
    if cluster_id is None:
        return True
    for resource in state.get("resources") or []:
        if resource.get("type") != SLOT_TYPE or not resource.get("id"):
            continue
        tags = (resource.get("outputs") or {}).get("tags") or {}
        if tags.get(TAG_CLUSTER) != cluster_id:
            return False
        if install_id is not None and tags.get(TAG_INSTALL) != install_tag(install_id):
            return False
    return True


def cluster_in(state: Mapping[str, Any]) -> str | None:
    """The cluster tag the state's instances carry (the first one's), if any."""
    for resource in state.get("resources") or []:
        if resource.get("type") == SLOT_TYPE and resource.get("id"):
            value = ((resource.get("outputs") or {}).get("tags") or {}).get(TAG_CLUSTER)
            if value:
                return str(value)
    return None


def applied_config_in(state: Mapping[str, Any]) -> StackConfig | None:
    """The config of the stack's last up (the program exports it)."""
    roots = [r for r in state.get("resources") or [] if r.get("type") == "pulumi:pulumi:Stack"]
    output = (roots[0].get("outputs") or {}).get("config") if roots else None
    return StackConfig.model_validate(output) if isinstance(output, dict) else None


def carried_over(
    config: StackConfig, state: Mapping[str, Any], owned: dict[int, str]
) -> StackConfig:
    """Carry the fallbacks and adoptions of the last config for the slots that kept their
    instance: dropping either would replace that instance. An instance imported by a run
    that did not finish stays adopted too (its run never exported the config naming it)."""
    previous = applied_config_in(state)
    if previous is not None:
        config = config.keeping_fallbacks(previous, set(owned)).keeping_adopted(previous, owned)
    return unrecorded_imports_kept(config, state)


def unrecorded_imports_kept(config: StackConfig, state: Mapping[str, Any]) -> StackConfig:
    """`config` adopting, where they are, the slots' instances the state holds as imported
    (no `hostname` among their inputs: the program sets one on every instance it creates,
    an import leaves what the cloud never reports back unset) that `config` does not name as
    adopted. The import lands in the state at its step, the exported config only at the end
    of a run that succeeds: after a run that failed or was killed in between, planning those
    inputs now would reinstall the instance (hostname: `ResetInstance`) or replace it."""
    imported = {
        slot: resource
        for resource in state.get("resources") or []
        if resource.get("type") == SLOT_TYPE
        and resource.get("id")
        and "hostname" not in (resource.get("inputs") or {})
        and (slot := slot_of_urn(resource.get("urn", ""))) is not None
        and slot < config.count
        and config.adopted.get(slot) != resource["id"]
    }
    if not imported:
        return config
    where: dict[int, tuple[str, str, ChargeType]] = {}
    for slot, resource in imported.items():
        inputs = resource.get("inputs") or {}
        zone, kind = inputs.get("availabilityZone"), inputs.get("instanceType")
        charge = inputs.get("instanceChargeType")
        if zone in config.zones and kind in config.instance_types and charge in list(ChargeType):
            where[slot] = (zone, kind, ChargeType(charge))  # as it is, or it would be replaced
    adopted = {**config.adopted, **{slot: r["id"] for slot, r in imported.items()}}
    return config.placing(where).model_copy(update={"adopted": adopted})


def pinned(config: StackConfig, previous: StackConfig | None, slots: list[int]) -> StackConfig:
    """`config` with `slots` placed exactly where `previous` had them (type, zone, charge): a
    surge instance is made, and promoted, with its slot's inputs, or the promotion would
    replace it."""
    if previous is None or not slots:
        return config

    def pin(mine: Mapping[int, T], theirs: Mapping[int, T]) -> dict[int, T]:
        kept = {slot: value for slot, value in mine.items() if slot not in slots}
        return {**kept, **{slot: theirs[slot] for slot in slots if slot in theirs}}

    return config.model_copy(
        update={
            "slot_types": pin(config.slot_types, previous.slot_types),
            "slot_zones": pin(config.slot_zones, previous.slot_zones),
            "slot_charges": pin(config.slot_charges, previous.slot_charges),
        }
    )
