"""metav1 conditions on a Spotpool, and the kstatus pair derived from the others.

kstatus (what Flux, Argo CD's checks, `kubectl wait` and cli-utils read) looks at
`observedGeneration`, `Reconciling` and `Stalled`: InProgress while Reconciling is True or the
generation is not yet observed, Failed while Stalled is True, Current otherwise.
"""

from datetime import datetime

from spotpool.api.status import Condition, ConditionType, Phase, SpotpoolStatus
from spotpool_operator.reporting.logmask import mask

READY = ConditionType.READY.value
PROGRESSING = ConditionType.PROGRESSING.value
DEGRADED = ConditionType.DEGRADED.value
RECONCILING = ConditionType.RECONCILING.value
STALLED = ConditionType.STALLED.value
# Failures no retry gets past until a person changes something (failures.py names them): the
# spec, the credentials' Secret, the account's quota or permissions, the install's tools.
STALLING = frozenset(
    {
        "InvalidSpec",
        "CredentialsMissing",
        "SecretNotFound",
        "SecretKeyMissing",
        "QuotaExceeded",
        "AuthFailure",
        "Unauthorized",
        "CloudRejected",
        "ToolchainMissing",
        # a SpotpoolAccessPolicy refuses the pool: the admin's policy or the spec must change
        "OperatorIdentityNotAllowed",
        "RoleNotAllowed",
        "RegionNotAllowed",
        "PolicyConflict",
    }
)


def with_condition(
    status: SpotpoolStatus,
    type_: str,
    value: bool,
    reason: str,
    message: str,
    generation: int | None,
    now: datetime,
) -> SpotpoolStatus:
    text = "True" if value else "False"
    old = next((c for c in status.conditions if c.type == type_), None)
    new = Condition(
        type=type_,
        status=text,
        reason=reason,
        message=mask(message),  # tenants read it: a quoted cloud error must carry no key
        last_transition_time=old.last_transition_time if old and old.status == text else now,
        observed_generation=generation,
    )
    if old is None:
        conditions = [*status.conditions, new]
    else:
        conditions = [new if c.type == type_ else c for c in status.conditions]
    return status.model_copy(update={"conditions": conditions})


def without_condition(status: SpotpoolStatus, type_: str) -> SpotpoolStatus:
    return status.model_copy(
        update={"conditions": [c for c in status.conditions if c.type != type_]}
    )


def condition(status: SpotpoolStatus, type_: str) -> Condition | None:
    return next((c for c in status.conditions if c.type == type_), None)


def _is(status: SpotpoolStatus, type_: str) -> Condition | None:
    found = condition(status, type_)
    return found if found is not None and found.status == "True" else None


def kstatus(status: SpotpoolStatus, generation: int | None, now: datetime) -> SpotpoolStatus:
    """Reconciling and Stalled as kstatus reads them, from the other conditions and the phase.

    Stalled: the last failure was one no retry gets past (STALLING) for this generation.
    Reconciling: otherwise, while an operation runs, the pool is short of Ready (starting,
    replacing, retrying) or the spec's generation is not yet the observed one."""
    ready, degraded, progressing = (_is(status, t) for t in (READY, DEGRADED, PROGRESSING))
    said = condition(status, READY)
    settled = said.reason if said is not None else "Pending"
    stalled = (
        degraded is not None
        and degraded.reason in STALLING
        and (progressing is None or degraded.observed_generation == generation)
    )
    behind = generation is not None and status.observed_generation != generation
    if stalled and degraded is not None:
        status = with_condition(
            status, STALLED, True, degraded.reason, degraded.message, generation, now
        )
        return with_condition(status, RECONCILING, False, degraded.reason, "", generation, now)
    status = with_condition(status, STALLED, False, settled, "", generation, now)
    why: tuple[str, str] | None = None
    if status.phase == Phase.PAUSED:
        why = None
    elif progressing is not None:
        why = (progressing.reason, progressing.message)
    elif behind:
        why = ("NewGeneration", f"generation {generation} is not acted on yet")
    elif ready is None:  # starting, replacing, or retrying after a failure
        cause = degraded or said
        why = (cause.reason, cause.message) if cause else ("Pending", "not converged yet")
    if why is None:
        return with_condition(status, RECONCILING, False, settled, "", generation, now)
    return with_condition(status, RECONCILING, True, why[0], why[1], generation, now)


def spec_fixed(status: SpotpoolStatus, generation: int | None) -> bool:
    """Degraded by a stalling failure of an earlier generation: the new spec needs no run."""
    degraded = _is(status, DEGRADED)
    return (
        status.phase == Phase.DEGRADED
        and degraded is not None
        and degraded.reason in STALLING
        and degraded.observed_generation != generation
    )
