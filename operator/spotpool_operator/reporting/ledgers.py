"""A SpotpoolAccessPolicy's ledger at the API server (spotpool.api.reservations): read fresh
with the policy's limits and resourceVersion, and written as a merge patch of its status that
carries that resourceVersion, so the API server refuses it (409) when anyone wrote the policy
since: two replicas reserving at once cannot both take the last room. The policy is
cluster-scoped: a tenant cannot write it."""

import logging
from dataclasses import dataclass, field
from typing import Any, cast

import kubernetes
from pydantic import ValidationError

from spotpool.api.access import ACCESS_PLURAL, AccessPolicySpec, Limits
from spotpool.api.reservations import Reservation, reserved
from spotpool.api.spec import GROUP, VERSION

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ledger:
    """One policy as read just now: its limits (None: it sets none), why it is not understood
    (None: it is), every pool's reservation by uid, and the version a write must match."""

    policy: str
    version: str
    limits: Limits | None
    entries: dict[str, Reservation] = field(default_factory=dict)
    problem: str | None = None


def parse(item: dict[str, Any]) -> Ledger:
    """A policy object as the API server returns it, as a ledger."""
    meta = item.get("metadata") or {}
    name = str(meta.get("name", ""))
    limits, problem = None, None
    try:
        limits = AccessPolicySpec.model_validate(item.get("spec") or {}).limits
    except ValidationError as error:
        problem = _first(error)
    entries: dict[str, Reservation] = {}
    for uid, raw in ((item.get("status") or {}).get("reservations") or {}).items():
        try:
            entries[str(uid)] = Reservation.model_validate(raw)
        except ValidationError:  # not ours to guess at; the admin sees it in the status
            log.warning("SpotpoolAccessPolicy %s: reservation %s not understood", name, uid)
    return Ledger(name, str(meta.get("resourceVersion", "")), limits, entries, problem)


def read(custom: Any, name: str) -> Ledger | None:
    """The policy's ledger now (None: the policy is gone)."""
    try:
        item = custom.get_cluster_custom_object(
            GROUP, VERSION, ACCESS_PLURAL, name, _request_timeout=30
        )
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return None
        raise
    return parse(cast(dict[str, Any], item))


def write(custom: Any, ledger: Ledger, changes: dict[str, Reservation | None]) -> bool:
    """Set (or with None remove) these pools' reservations, and the sums, over exactly the
    version read: False when the policy changed since (read it again and decide again)."""
    entries = dict(ledger.entries)
    for uid, entry in changes.items():
        if entry is None:
            entries.pop(uid, None)
        else:
            entries[uid] = entry
    body = {
        "metadata": {"resourceVersion": ledger.version},
        "status": {
            "reservations": {
                uid: None if e is None else e.model_dump(mode="json", by_alias=True)
                for uid, e in changes.items()
            },
            "reserved": reserved(entries).model_dump(mode="json", by_alias=True),
        },
    }
    try:
        custom.patch_cluster_custom_object_status(
            GROUP, VERSION, ACCESS_PLURAL, ledger.policy, body,
            _content_type="application/merge-patch+json", _request_timeout=30,
        )  # fmt: skip
    except kubernetes.client.ApiException as error:
        if error.status == 409:  # written since we read it
            return False
        if error.status == 404:  # the policy is gone: nothing to reserve against
            return True
        raise
    return True


def _first(error: ValidationError) -> str:
    found = error.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(p) for p in found["loc"]) or "spec"
    return f"spec.{where}: {found['msg']}"
