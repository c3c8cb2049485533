"""What changes a running instance in place, as the console does it: Start, Stop, Reboot and
ModifyInstancesAttribute (name, security groups, ...), with the checks the real API makes, so a
change made this way is what the provider's next refresh reads (DescribeInstances shows it)."""

from collections.abc import Callable
from typing import Any

from spotpool.emulator import params
from spotpool.emulator.cvm import check_id, found_instances
from spotpool.emulator.errors import ApiError, invalid_value
from spotpool.emulator.instances import InstanceRecord
from spotpool.emulator.world import Context


def _check_settled(operation: str, records: list[InstanceRecord], allowed: set[str]) -> None:
    """The API's refusal of an instance that is busy or in a state the operation cannot take."""
    for r in records:
        if r.busy:
            raise ApiError(
                "OperationDenied.InstanceOperationInProgress",
                f"{r.instance_id} is busy with {r.latest_operation}.",
            )
        if r.state not in allowed:
            raise ApiError(
                f"UnsupportedOperation.InstanceState{r.state.capitalize()}",
                f"{operation} needs {' or '.join(sorted(allowed))} instances; "
                f"{r.instance_id} is {r.state}.",
            )


def _power(
    operation: str, needs: str, during: str, after: str
) -> Callable[[Context, dict[str, Any]], dict[str, Any]]:
    """Start, Stop and Reboot differ only in the states they need and pass through."""

    def handler(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
        p = params.parse(params.InstanceIds, body)
        records = found_instances(ctx, p.instance_ids)
        _check_settled(operation, records, {needs})
        until = ctx.now + ctx.world.settings.boot_seconds
        for r in records:
            r.begin(operation, during, after, until, ctx.request_id)
        ctx.world.touch(*records)
        return {}

    return handler


STOP_TYPES = {"SOFT", "HARD", "SOFT_FIRST"}
STOPPED_MODES = {"KEEP_CHARGING", "STOP_CHARGING"}


def stop_instances(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """StopInstances, with the checks of its options the real API makes (a console stop)."""
    p = params.parse(params.StopInstances, body)
    if p.stop_type is not None and p.stop_type not in STOP_TYPES:
        raise invalid_value("StopType", f"{p.stop_type}; one of {', '.join(sorted(STOP_TYPES))}.")
    if p.stop_type is not None and p.force_stop is not None:
        raise ApiError("InvalidParameterCombination", "Give StopType or ForceStop, not both.")
    if p.stopped_mode is not None and p.stopped_mode not in STOPPED_MODES:
        raise invalid_value(
            "StoppedMode", f"{p.stopped_mode}; one of {', '.join(sorted(STOPPED_MODES))}."
        )
    records = found_instances(ctx, p.instance_ids)
    if p.stopped_mode == "STOP_CHARGING":
        # Only some pay-as-you-go instances stop charging when stopped: never a spot one.
        for r in records:
            if r.spot:
                raise ApiError(
                    "UnsupportedOperation.StoppedModeStopCharging",
                    f"{r.instance_id} is a spot instance: it cannot stop charging when stopped.",
                )
    return _power("StopInstances", "RUNNING", "STOPPING", "STOPPED")(ctx, body)


INSTANCE_NAME_LIMIT = 60


def modify_instances_attribute(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """Name or security groups (one of them a request, as the API allows), hostname and
    termination protection, of RUNNING or STOPPED instances; DescribeInstances then shows the
    change and LatestOperation ModifyInstancesAttribute SUCCESS."""
    p = params.parse(params.ModifyInstancesAttribute, body)
    records = found_instances(ctx, p.instance_ids)
    if (
        p.instance_name is None
        and p.security_groups is None
        and p.disable_api_termination is None
        and p.host_name is None
    ):
        raise ApiError("MissingParameter", "Give at least one attribute to modify.")
    if p.instance_name is not None and p.security_groups is not None:
        raise ApiError(
            "InvalidParameterCombination", "Give InstanceName or SecurityGroups, not both."
        )
    if p.instance_name is not None and not 0 < len(p.instance_name) <= INSTANCE_NAME_LIMIT:
        raise ApiError(
            "InvalidInstanceName.TooLong",
            f"InstanceName takes 1 to {INSTANCE_NAME_LIMIT} characters.",
        )
    for group in p.security_groups or []:
        check_id("SecurityGroupIds", group)
    _check_settled("ModifyInstancesAttribute", records, {"RUNNING", "STOPPED"})
    for r in records:
        if p.instance_name is not None:
            r.name = p.instance_name
        if p.security_groups is not None:
            r.security_group_ids = p.security_groups
        if p.disable_api_termination is not None:
            r.disable_api_termination = p.disable_api_termination
        if p.host_name is not None:
            r.host_name = p.host_name
        r.latest_operation, r.latest_operation_state = "ModifyInstancesAttribute", "SUCCESS"
        r.latest_operation_request_id = ctx.request_id
    ctx.world.touch(*records)
    return {}


ACTIONS: dict[str, Callable[[Context, dict[str, Any]], dict[str, Any]]] = {
    "StartInstances": _power("StartInstances", "STOPPED", "STARTING", "RUNNING"),
    "StopInstances": stop_instances,
    "RebootInstances": _power("RebootInstances", "RUNNING", "REBOOTING", "RUNNING"),
    "ModifyInstancesAttribute": modify_instances_attribute,
}
