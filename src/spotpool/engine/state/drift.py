"""Find drift in a stack's state after a refresh: a slot's instance whose name, security
groups, tags or running state (what the refresh read from the cloud, its outputs) differ from
what the stack program sets for it (from the config the last up applied and the instance's own
recorded inputs). Pure: reads the exported state, nothing else, so `spotpool stacks show` and
the PR preview tell the same drift as the operator without a cloud call.

The desired values cannot all come from the state's inputs: a refresh of a bridged provider
writes what it read into the inputs it tracks (instanceName, orderlySecurityGroups,
runningFlag), so the second refresh would no longer see a drift the first one saw. Name and
security groups come from the applied config; tags from the recorded inputs (the refresh keeps
those) with the pool's own tags from the config on top.
"""

from collections.abc import Mapping
from typing import Any

from spotpool.api.drift import FieldDrift, InstanceDrift
from spotpool.api.notices import NONCE_TAG
from spotpool.api.stackconfig import StackConfig
from spotpool.engine.state.stack_state import SLOT_TYPE, applied_config_in
from spotpool.engine.state.urns import slot_of_urn

# A stopped instance was told to stop (a reclaim removes it instead: the refresh drops the slot).
# STOPPING is not counted yet: it may be passing (the next refresh sees where it settles), and
# what a reclaimed instance passes through is not documented.
STOPPED = "STOPPED"
RUNNING = "RUNNING"


def drift_in(state: Mapping[str, Any]) -> list[InstanceDrift]:
    """Every slot instance of `state` that differs from what the stack sets, by slot."""
    config = applied_config_in(state)
    found = []
    for resource in state.get("resources") or []:
        slot = slot_of_urn(resource.get("urn", ""))
        if resource.get("type") != SLOT_TYPE or not resource.get("id") or slot is None:
            continue
        if config is not None and slot >= config.count:
            continue  # leaving at the next up anyway
        fields = instance_drift(resource, config, slot)
        if fields:
            found.append(InstanceDrift(slot=slot, instance_id=resource["id"], fields=fields))
    return sorted(found, key=lambda d: d.slot)


def instance_drift(
    resource: Mapping[str, Any], config: StackConfig | None, slot: int
) -> list[FieldDrift]:
    inputs: Mapping[str, Any] = resource.get("inputs") or {}
    outputs: Mapping[str, Any] = resource.get("outputs") or {}
    fields: list[FieldDrift] = []
    if config is not None:
        wanted, name = config.instance_name(slot), outputs.get("instanceName")
        if name is not None and name != wanted:
            fields.append(FieldDrift(field="instanceName", desired=wanted, actual=str(name)))
        groups = list(config.security_group_ids)
        found = outputs.get("orderlySecurityGroups") or outputs.get("securityGroups")
        if groups and found is not None and list(found) != groups:
            wanted, actual = ",".join(groups), ",".join(str(g) for g in found)
            fields.append(FieldDrift(field="securityGroups", desired=wanted, actual=actual))
    fields += _tag_drift(inputs, outputs, config, slot)
    status = outputs.get("instanceStatus")
    if status == STOPPED or outputs.get("runningFlag") is False:
        fields.append(FieldDrift(field="running", desired=RUNNING, actual=str(status)))
    return fields


def _tag_drift(
    inputs: Mapping[str, Any],
    outputs: Mapping[str, Any],
    config: StackConfig | None,
    slot: int,
) -> list[FieldDrift]:
    actual: Mapping[str, Any] | None = outputs.get("tags")
    if actual is None:
        return []
    wanted = {k: str(v) for k, v in (inputs.get("tags") or {}).items() if k != "__defaults"}
    if config is not None:
        wanted.update(config.instance_tags(slot))
    if "hostname" not in inputs:  # adopted: it keeps the generation its killed run made it with
        wanted.pop(NONCE_TAG, None)
        actual = {k: v for k, v in actual.items() if k != NONCE_TAG}
    fields = []
    for key in sorted(set(wanted) | set(actual)):
        want = wanted.get(key)
        have = None if actual.get(key) is None else str(actual[key])
        if want != have:
            fields.append(FieldDrift(field=f"tags.{key}", desired=want, actual=have))
    return fields
