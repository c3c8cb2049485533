"""A pool as the e2e tests look at it: its status's instances (by id, by slot) and every
instance the emulator ever made for it."""

from typing import Any

from tests.operator.world import OperatorWorld


def instances(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The status's instances by id."""
    return {str(i["instanceId"]): i for i in status.get("instances") or []}


def by_slot(status: dict[str, Any]) -> dict[int, str]:
    """The status's instance ids by slot."""
    return {int(i["slot"]): str(i["instanceId"]) for i in status.get("instances") or []}


def cloud_view(world: OperatorWorld, uid: str) -> dict[str, dict[str, Any]]:
    """Every instance the pool ever had in the emulator, gone ones included."""
    return {
        i["InstanceId"]: i
        for i in world.emulator.all_instances()
        if {"Key": "spotpool-pool-uid", "Value": uid} in (i.get("Tags") or [])
    }
