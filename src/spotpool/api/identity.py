"""How a pool reaches the cloud without long-lived keys: a CAM role to assume, the name rules
of role ARNs, and the STS session names the operator gives each pool (pure data, shared by the
spec, the engine and the docs)."""

import hashlib
import re

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# qcs::cam::uin/100001234567:roleName/spotpool-launcher (the form CAM shows for a role)
ROLE_ARN = r"^qcs::cam::uin/[0-9]{5,20}:roleName/[A-Za-z0-9+=,.@_-]{1,128}$"
SESSION_NAME = r"^[A-Za-z0-9+=,.@_-]{2,128}$"
MIN_ROLE_SECONDS = 900  # STS hands out temporary keys for 15 min ...
MAX_ROLE_SECONDS = 43200  # ... to 12 h
DEFAULT_ROLE_SECONDS = 7200
SESSION_PREFIX = "spotpool"
MAX_SESSION = 64  # STS takes 2-128 of [\w+=,.@-]; AWS's STS 64: kept within both
SESSION_DIGEST = 16  # hex characters of the digest ending a shortened session name


class AssumeRole(BaseModel):
    """A CAM role the pool's calls run as, assumed with the pool's Secret keys or, without a
    Secret, with the operator's own identity."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )
    role_arn: str = Field(
        pattern=ROLE_ARN,
        max_length=200,
        description="The role to assume, as CAM names it: "
        "qcs::cam::uin/<account uin>:roleName/<role>. Its account is where the instances run.",
    )
    session_name: str = Field(
        "spotpool",
        pattern=SESSION_NAME,
        description="Ignored (kept so that older manifests apply): the operator names every "
        "session spotpool_<namespace>_<pool> itself, so trust policies and CloudAudit can tell "
        "the teams apart.",
    )
    duration_seconds: int = Field(
        DEFAULT_ROLE_SECONDS,
        ge=MIN_ROLE_SECONDS,
        le=MAX_ROLE_SECONDS,
        description="Life of the temporary keys, 900 to 43200 s; the operator renews them "
        "at two thirds of their life.",
    )
    external_id: str | None = Field(
        None,
        min_length=2,
        max_length=128,
        description="Ignored (kept so that older manifests apply): the external id sent is the "
        "one of the SpotpoolAccessPolicy that grants the role, never the spec's.",
    )


def role_account(role_arn: str) -> str:
    """The account uin a role ARN names (where calls made as the role land)."""
    match = re.match(r"^qcs::cam::uin/([0-9]+):", role_arn)
    if match is None:
        raise ValueError(f"not a CAM role ARN: {role_arn!r}")
    return match.group(1)


def session_name(namespace: str, pool: str) -> str:
    """The STS session name of a pool, on a role and on the operator's own identity alike (no
    spec field chooses it): spotpool_<namespace>_<pool>. No Kubernetes name holds `_`, so the
    name splits back one way only, and a trust policy's `spotpool_team-b_*` is met by team-b's
    pools alone. Past MAX_SESSION characters the end gives way to `@` (in no name either) and a
    digest of the whole: spotpool_<namespace>_<pool's start>@<digest>, or with a namespace too
    long for that, spotpool_<namespace's start>@<digest>."""
    return _session(namespace, pool)


def sweep_session_name(namespace: str) -> str:
    """The session of the sweep of a namespace's deleted pools' instances:
    spotpool_<namespace>_=sweep (no pool's name holds `=`)."""
    return _session(namespace, "=sweep")


def _session(namespace: str, rest: str) -> str:
    full = f"{SESSION_PREFIX}_{namespace}_{rest}"
    if len(full) <= MAX_SESSION:
        return full
    whole = hashlib.sha256(f"{namespace}_{rest}".encode()).hexdigest()[:SESSION_DIGEST]
    room = MAX_SESSION - 1 - SESSION_DIGEST
    head = f"{SESSION_PREFIX}_{namespace}_"
    kept = full if len(head) < room else f"{SESSION_PREFIX}_{namespace}"
    return f"{kept[:room]}@{whole}"
