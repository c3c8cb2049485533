"""Render a Spotpool's status from what the engine did: pure functions, no I/O.

Every function takes the status as it was and returns the status as it is now. Conditions
keep their lastTransitionTime while their status stays the same, as Kubernetes expects; every
change of Ready, Progressing or Degraded also sets the kstatus pair (conditions.py).
"""

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from spotpool.api.spec import ChargeType
from spotpool.api.status import (
    AcceptedNotice,
    Instance,
    Operation,
    Phase,
    Reclaims,
    SpotpoolStatus,
    StackStatus,
    Surge,
)
from spotpool.engine.basics.results import OperationResult, SlotOutput
from spotpool_operator.reporting.conditions import (
    DEGRADED,
    PROGRESSING,
    READY,
    RECONCILING,
    STALLED,
    STALLING,
    condition,
    kstatus,
    spec_fixed,
    with_condition,
    without_condition,
)

__all__ = ["DEGRADED", "PROGRESSING", "READY", "RECONCILING", "STALLED", "STALLING", "condition"]

INLINE_CREDENTIALS = "InlineCredentials"
LIMITED = "Limited"  # a SpotpoolAccessPolicy's limit holds the pool below its desired count
RUNNING = "RUNNING"
SELECTOR_LABEL = "spotpool.devops.jokerbai.com/pool"


def parse(raw: Mapping[str, Any] | None) -> SpotpoolStatus:
    """The status a resource carries, or an empty one where it holds something unreadable."""
    known = {
        key: value
        for key, value in (raw or {}).items()
        if key in SpotpoolStatus.model_fields or _alias_known(key)
    }
    try:
        return SpotpoolStatus.model_validate(known)
    except ValueError:
        return SpotpoolStatus()


def _alias_known(key: str) -> bool:
    return any(field.alias == key for field in SpotpoolStatus.model_fields.values())


def identity(
    status: SpotpoolStatus, name: str, stack: str, backend: str, desired: int
) -> SpotpoolStatus:
    """The fields every write carries: desired count, selector and stack name."""
    last = status.stack.last_operation if status.stack else None
    return status.model_copy(
        update={
            "replicas": desired,
            "selector": f"{SELECTOR_LABEL}={name}",
            "stack": StackStatus(name=stack, backend=backend, last_operation=last),
        }
    )


def inline_credentials(
    status: SpotpoolStatus, inline: bool, message: str, generation: int | None, now: datetime
) -> SpotpoolStatus:
    if not inline:
        return without_condition(status, INLINE_CREDENTIALS)
    return with_condition(
        status, INLINE_CREDENTIALS, True, "InlineCredentials", message, generation, now
    )


def limited(
    status: SpotpoolStatus, message: str, generation: int | None, now: datetime
) -> SpotpoolStatus:
    """The Limited condition: True while a namespace limit holds the pool below its count."""
    if not message:
        return without_condition(status, LIMITED)
    return with_condition(status, LIMITED, True, "NamespaceLimit", message, generation, now)


def progressing(
    status: SpotpoolStatus, reason: str, message: str, generation: int | None, now: datetime
) -> SpotpoolStatus:
    """An operation starts: Progressing, and the phase says what is going on."""
    phase = Phase.DELETING if reason == "Deleting" else Phase.CONVERGING
    status = with_condition(status, PROGRESSING, True, reason, message, generation, now)
    return kstatus(status.model_copy(update={"phase": phase}), generation, now)


def _instances(outputs: list[SlotOutput]) -> list[Instance]:
    return [
        Instance(
            instance_id=item.instance_id,
            public_ip=item.public_ip,
            private_ip=item.private_ip,
            zone=item.zone,
            instance_type=item.instance_type,
            state=item.state,
            slot=item.slot,
            charge_type=item.charge_type,
            nonce=item.nonce,
        )
        for item in sorted(outputs, key=lambda item: item.slot)
    ]


def _on_demand(instances: list[Instance]) -> int:
    return sum(1 for i in instances if i.charge_type == ChargeType.POSTPAID_BY_HOUR)


def _operation(
    status: SpotpoolStatus, kind: str, result: str, started: datetime, now: datetime, **extra: Any
) -> SpotpoolStatus:
    stack = status.stack or StackStatus(name="", backend="")
    operation = Operation(kind=kind, result=result, start_time=started, end_time=now, **extra)
    return status.model_copy(
        update={"stack": stack.model_copy(update={"last_operation": operation})}
    )


def with_instances(status: SpotpoolStatus, outputs: list[SlotOutput]) -> SpotpoolStatus:
    instances = _instances(outputs)
    return status.model_copy(
        update={
            "instances": instances,
            "size": len(instances),
            "ready_replicas": sum(1 for i in instances if i.state == RUNNING),
            "on_demand_replicas": _on_demand(instances),
        }
    )


def converged(
    status: SpotpoolStatus,
    result: OperationResult,
    generation: int | None,
    started: datetime,
    now: datetime,
) -> SpotpoolStatus:
    """An `up` succeeded: the instances it reports are the pool."""
    status = with_instances(status, result.instances)
    status = _operation(status, str(result.kind), "succeeded", started, now, changes=result.changes)
    desired, ready = status.replicas, status.ready_replicas
    if ready >= desired:
        reason, message = "Converged", f"{ready} of {desired} instances running"
        status = with_condition(status, READY, True, reason, message, generation, now)
        phase = Phase.READY
    else:
        reason = "InstancesNotRunning"
        message = f"{ready} of {desired} instances running; the rest are starting"
        status = with_condition(status, READY, False, reason, message, generation, now)
        phase = Phase.CONVERGING
    status = with_condition(status, PROGRESSING, False, reason, message, generation, now)
    status = with_condition(status, DEGRADED, False, reason, message, generation, now)
    status = status.model_copy(update={"phase": phase, "observed_generation": generation})
    return kstatus(status, generation, now)


def refreshed(
    status: SpotpoolStatus, result: OperationResult, started: datetime, now: datetime
) -> SpotpoolStatus:
    """A `refresh` succeeded: slots the cloud took away leave the status at once."""
    gone = set(result.gone_slots)
    left = [item for item in result.instances if item.slot not in gone]
    status = with_instances(status, left)
    status = _operation(status, str(result.kind), "succeeded", started, now, changes=result.changes)
    if not gone:
        return status
    return _counted_reclaims(status, len(gone), now)


def reclaimed(status: SpotpoolStatus, gone_slots: set[int], now: datetime) -> SpotpoolStatus:
    """The fleet probe saw the cloud take these slots' instances: they leave the status."""
    left = [i for i in status.instances if i.slot not in gone_slots]
    status = status.model_copy(
        update={
            "instances": left,
            "size": len(left),
            "ready_replicas": sum(1 for i in left if i.state == RUNNING),
            "on_demand_replicas": _on_demand(left),
        }
    )
    return _counted_reclaims(status, len(gone_slots), now)


def _counted_reclaims(status: SpotpoolStatus, count: int, now: datetime) -> SpotpoolStatus:
    generation = status.observed_generation
    message = f"{status.ready_replicas} of {status.replicas} instances running: replacing"
    status = with_condition(status, READY, False, "Reclaimed", message, generation, now)
    reclaims = Reclaims(total=status.reclaims.total + count, last_time=now)
    status = status.model_copy(update={"reclaims": reclaims, "phase": Phase.CONVERGING})
    return kstatus(status, generation, now)


def failed(
    status: SpotpoolStatus,
    kind: str,
    reason: str,
    message: str,
    generation: int | None,
    started: datetime,
    now: datetime,
) -> SpotpoolStatus:
    """An operation failed: Degraded says why; Ready holds only while the pool is full."""
    status = _operation(status, kind, "failed", started, now)
    status = with_condition(status, DEGRADED, True, reason, message, generation, now)
    status = with_condition(status, PROGRESSING, False, reason, message, generation, now)
    if status.ready_replicas < status.replicas or kind != "refresh":
        status = with_condition(status, READY, False, reason, message, generation, now)
    update: dict[str, Any] = {"phase": Phase.DEGRADED}
    if generation is not None and kind != "refresh":
        update["observed_generation"] = generation
    return kstatus(status.model_copy(update=update), generation, now)


PAUSED = "spec.paused is true: no changes are made to this pool"
PAUSED_DELETION = (
    "spec.paused is true, so the pool is left as it is and deletion waits: set paused to false "
    "to let it finish"
)


def paused(
    status: SpotpoolStatus, generation: int | None, now: datetime, deleting: bool = False
) -> SpotpoolStatus:
    """Paused: no changes made; `deleting`: the pool's deletion waits for the unpause."""
    reason, message = ("DeletionPaused", PAUSED_DELETION) if deleting else ("Paused", PAUSED)
    status = with_condition(status, PROGRESSING, False, reason, message, generation, now)
    status = status.model_copy(update={"phase": Phase.PAUSED, "observed_generation": generation})
    return kstatus(status, generation, now)


def observed(
    status: SpotpoolStatus, replicas: int, generation: int | None, now: datetime
) -> SpotpoolStatus:
    """A spec change that needs no engine run (unpause with nothing to change, deletionPolicy,
    refreshInterval, labels): the status says it saw the generation, and a pool that was
    Paused or Degraded by the previous spec shows what it is now."""
    status = status.model_copy(update={"replicas": replicas})
    if spec_fixed(status, generation):  # what stalled it was the earlier spec's
        status = with_condition(status, DEGRADED, False, "SpecChanged", "", generation, now)
        status = status.model_copy(update={"phase": Phase.CONVERGING})
    if status.phase in (Phase.PAUSED, Phase.READY, Phase.CONVERGING, None):
        ready, desired = status.ready_replicas, status.replicas
        if ready >= desired:
            reason, message, phase = (
                "Converged",
                f"{ready} of {desired} instances running",
                Phase.READY,
            )
        else:
            reason = "InstancesNotRunning"
            message = f"{ready} of {desired} instances running; the rest are starting"
            phase = Phase.CONVERGING
        status = with_condition(status, READY, ready >= desired, reason, message, generation, now)
        status = with_condition(status, PROGRESSING, False, reason, message, generation, now)
        status = status.model_copy(update={"phase": phase})
    status = status.model_copy(update={"observed_generation": generation})
    return kstatus(status, generation, now)


def to_patch(status: SpotpoolStatus) -> dict[str, Any]:
    """A JSON merge patch that makes the stored status exactly `status`.

    Unset fields of objects become null (merge patch: remove); lists are replaced whole, so
    inside them unset fields are simply left out.
    """
    return dict(_clean(status.model_dump(mode="json", by_alias=True), in_list=False))


def _clean(value: Any, in_list: bool) -> Any:
    if isinstance(value, dict):
        return {
            key: _clean(item, in_list)
            for key, item in value.items()
            if not (item is None and in_list)
        }
    if isinstance(value, list):
        return [_clean(item, in_list=True) for item in value]
    return value


def noticed(status: SpotpoolStatus, count: int, now: datetime) -> SpotpoolStatus:
    """Termination notices taken in: counted (their replacements start right after)."""
    notices = status.notices.model_copy(
        update={"total": status.notices.total + count, "last_time": now}
    )
    return status.model_copy(update={"notices": notices})


def accepting(status: SpotpoolStatus, accepted: Mapping[int, AcceptedNotice]) -> SpotpoolStatus:
    """The notices taken in whose replacement has not started yet, kept in the status so the
    replica serving the pool next starts them."""
    items = [accepted[slot] for slot in sorted(accepted)]
    notices = status.notices.model_copy(update={"accepted": items})
    return status.model_copy(update={"notices": notices})


def with_surges(
    status: SpotpoolStatus,
    surges: list[SlotOutput],
    noticed: Mapping[int, AcceptedNotice] | None = None,
    now: datetime | None = None,
) -> SpotpoolStatus:
    """The surge instances an operation left (a promoted one is gone from the list: it is the
    slot's instance now), keeping what the notice said about each (`noticed`: slot -> the
    notice), when it was received and when the surge started (`now` for a new one)."""
    earlier = {s.slot: s for s in status.surges}
    items = []
    for out in sorted(surges, key=lambda out: out.slot):
        before, notice = earlier.get(out.slot), (noticed or {}).get(out.slot)
        said: tuple[str | None, datetime | None, datetime | None]
        if notice is not None:
            said = (notice.instance_id, notice.termination_time, notice.received_time)
        elif before is not None:
            said = (before.replacing, before.termination_time, before.received_time)
        else:
            said = (None, None, None)
        same = before is not None and before.instance_id == out.instance_id
        items.append(
            Surge(
                slot=out.slot,
                instance_id=out.instance_id,
                replacing=said[0],
                termination_time=said[1],
                received_time=said[2],
                start_time=before.start_time if same and before else now,
                state=out.state,
            )
        )
    return status.model_copy(update={"surges": items})


def unfulfilled(status: SpotpoolStatus, retired: Iterable[Surge]) -> SpotpoolStatus:
    """Remember the instances whose surge was retired unfulfilled, so that a further notice
    of theirs starts no second one; kept while the status lists them (so bounded)."""
    listed = {i.instance_id for i in status.instances}
    known = [*status.notices.unfulfilled, *(s.replacing for s in retired if s.replacing)]
    kept = [i for i in dict.fromkeys(known) if i in listed]
    return status.model_copy(
        update={"notices": status.notices.model_copy(update={"unfulfilled": kept})}
    )


def surged(
    status: SpotpoolStatus,
    result: OperationResult,
    noticed: Mapping[int, AcceptedNotice],
    started: datetime,
    now: datetime,
) -> SpotpoolStatus:
    """Replacements started on notices: the pool is still whole (the noticed instances run
    until the cloud takes them), so Ready and the phase stay as they were."""
    status = with_instances(status, result.instances)
    status = _operation(status, str(result.kind), "succeeded", started, now, changes=result.changes)
    return with_surges(status, result.surges, noticed, now)
