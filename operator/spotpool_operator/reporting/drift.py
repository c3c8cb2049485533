"""Drift on a Spotpool's status: the DriftDetected condition and status.drift, rendered from what
a full refresh found (instances changed outside the operator), and what its Events say. Pure
functions, no I/O; the reconciler (reclaims.py) decides what to do about it by
spec.driftPolicy."""

from datetime import datetime

from spotpool.api.drift import InstanceDrift, describe_all
from spotpool.api.spec import DriftPolicy
from spotpool.api.status import ConditionType, SpotpoolStatus
from spotpool_operator.reporting.conditions import condition, with_condition

DRIFT_DETECTED = ConditionType.DRIFT_DETECTED.value
FOUND = "ChangedOutsideOperator"  # the condition's reason while it is True


def found_message(drift: list[InstanceDrift], policy: DriftPolicy) -> str:
    """What the condition and the Event say: the instances, their fields, and what follows."""
    what = f"{len(drift)} instance(s) changed outside the operator: {describe_all(drift)}"
    if policy == DriftPolicy.CORRECT:
        return f"{what}; restoring them (driftPolicy Correct)"
    return f"{what}; left as found (driftPolicy Report) until the spec or driftPolicy changes"


def drifted(
    status: SpotpoolStatus,
    drift: list[InstanceDrift],
    policy: DriftPolicy,
    generation: int | None,
    now: datetime,
) -> SpotpoolStatus:
    """A full refresh found these instances changed outside the operator."""
    message = found_message(drift, policy)
    status = with_condition(status, DRIFT_DETECTED, True, FOUND, message, generation, now)
    return status.model_copy(update={"drift": drift})


def undrifted(
    status: SpotpoolStatus, reason: str, message: str, generation: int | None, now: datetime
) -> SpotpoolStatus:
    """No drift any more (restored by an up, undone by hand, or the instance left): the
    condition turns False; a pool that never drifted gets no condition at all."""
    if condition(status, DRIFT_DETECTED) is None and not status.drift:
        return status
    status = with_condition(status, DRIFT_DETECTED, False, reason, message, generation, now)
    return status.model_copy(update={"drift": []})


def without_slots(
    status: SpotpoolStatus, slots: set[int], generation: int | None, now: datetime
) -> SpotpoolStatus:
    """These slots got new instances (a targeted replacement): their drift left with the old
    ones; the other slots' drift stays as found."""
    left = [d for d in status.drift if d.slot not in slots]
    if left == status.drift:
        return status
    if not left:
        return undrifted(
            status, "InstancesReplaced", "the drifted instances were replaced", generation, now
        )
    found = condition(status, DRIFT_DETECTED)
    message = found.message if found is not None else describe_all(left)
    status = with_condition(status, DRIFT_DETECTED, True, FOUND, message, generation, now)
    return status.model_copy(update={"drift": left})


def is_known(status: SpotpoolStatus, drift: list[InstanceDrift]) -> bool:
    """The status already tells exactly this drift (no second Event for it)."""
    found = condition(status, DRIFT_DETECTED)
    return found is not None and found.status == "True" and status.drift == drift
