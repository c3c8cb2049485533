"""Ownership that no setting can break (issue 48): who claims an identity, and which cluster
holds each stack, kept in the state backend where every other claimant sees them.

- A **claim** (`.spotpool/claims/<cluster>/<nonce>.json`) is one operator process's: the
  cluster id it tags instances with, its install, the kube-system uid it runs in, its Lease, a
  nonce of its own and when it last renewed (every few seconds). Two live processes claiming
  one (cluster, install) that are not members of one install in one cluster (a copied
  `--cluster-id`, an etcd-snapshot clone, two installs given one install id) are rivals:
  each stops every sweep, adoption and re-tag until a person resolves it.
- A **holder record** (`.spotpool/holders/<stack>.json`) names the cluster that runs a stack.
  Another live cluster's stack is never `up`'d, re-tagged or destroyed; taking it over is
  explicit (naming the old cluster) or automatic once the old cluster's newest claim is older
  than a stated time.

The rules are pure (`rivals`, `takeover_refused`); the reads and writes are small files.
"""

import hashlib
import json
import logging
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from spotpool.engine.state.backend_files import BackendFiles, read_if_present

CLAIMS = ".spotpool/claims/"
HOLDERS = ".spotpool/holders/"
RENEW_EVERY = 5.0  # seconds between two renewals of a process's claim
LIVE_FOR = 60.0  # a claim not renewed for this long is a stopped process's
log = logging.getLogger(__name__)


class Claim(BaseModel):
    cluster: str = Field(description="The cluster id the process tags instances with.")
    install: str = Field(description="Its install id (tag spotpool-install).")
    nonce: str = Field(description="The process's own id (its Leases' holder identity).")
    kube_uid: str | None = Field(None, description="The kube-system uid where it runs.")
    lease: str | None = Field(None, description="namespace/name of its install's Lease.")
    host: str = ""
    started: float = Field(description="Epoch seconds, the claimant's clock.")
    renewed: float = Field(description="Epoch seconds of its last renewal, its clock.")
    # How long after its renewal it counts as live: a claim in the cloud (claim_tags.py) is
    # renewed less often. Never written to the backend.
    live_for: float = Field(LIVE_FOR, exclude=True)


class Holder(BaseModel):
    cluster: str = Field(description="The cluster whose operator runs the stack.")
    kube_uid: str | None = None
    since: float = Field(description="Epoch seconds it took (or first recorded) the stack.")


def _safe(value: str) -> str:
    """A value as one path segment: as it is when plain, else its digest."""
    if re.fullmatch(r"[A-Za-z0-9._-]{1,100}", value) and value not in (".", ".."):
        return value
    return "h-" + hashlib.sha256(value.encode()).hexdigest()[:32]


def write_claim(files: BackendFiles, claim: Claim) -> None:
    files.write(f"{CLAIMS}{_safe(claim.cluster)}/{_safe(claim.nonce)}.json",
                claim.model_dump_json().encode())  # fmt: skip


def delete_claim(files: BackendFiles, claim: Claim) -> None:
    """A process stopping cleanly: its Leases are released, so no Lease would vouch for its
    last claim to its successor; the claim goes with them."""
    files.delete(f"{CLAIMS}{_safe(claim.cluster)}/{_safe(claim.nonce)}.json")


def read_claims(files: BackendFiles, cluster: str) -> list[Claim]:
    """Every claim of `cluster` (any install); one unreadable (half-written) is skipped."""
    found = []
    for key in files.keys(f"{CLAIMS}{_safe(cluster)}/"):
        if not key.endswith(".json"):
            continue
        try:
            claim = Claim.model_validate_json(files.read(key))
        except FileNotFoundError:
            continue
        except ValueError as error:
            log.info("claim %s unreadable: %s", key, type(error).__name__)
            continue
        if claim.cluster == cluster:
            found.append(claim)
    return found


def newest_claim(files: BackendFiles, cluster: str) -> float | None:
    """When `cluster`'s newest claim was renewed (its clock), or None: it never claimed."""
    claims = read_claims(files, cluster)
    return max((c.renewed for c in claims), default=None)


@dataclass
class Watch:
    """What one claimant remembers between its checks."""

    # identity -> the newest renewTime (epoch) a Lease of this install in this cluster showed
    # it holding: a process once seen renewing here is this cluster's, for its claims that old.
    members: dict[str, float] = field(default_factory=dict)
    first_seen: dict[str, float] = field(default_factory=dict)  # nonce -> renewed, first read

    def saw_leases(self, holders: Mapping[str, float]) -> None:
        for identity, renewed in holders.items():
            self.members[identity] = max(renewed, self.members.get(identity, renewed))


def rivals(
    mine: Claim,
    claims: Collection[Claim],
    watch: Watch,
    now: float,
    slack: float,
    leases: bool = True,
) -> list[Claim]:
    """The other live claimants of this process's (cluster, install) that are not members of
    its install in its cluster. A member renews a Lease of the install here about when it
    renews its claim (`slack`: how far apart the two may be); a clone's Leases here are
    copies that stop at the snapshot while its claim goes on. Without Leases (run by hand) a
    claim counts once it moved while watched or since this process started: a killed
    predecessor's last claim is no rival."""
    found = []
    for claim in claims:
        if claim.nonce == mine.nonce or claim.install != mine.install:
            continue
        first = watch.first_seen.setdefault(claim.nonce, claim.renewed)
        if now - claim.renewed > claim.live_for:
            continue  # stopped (or a clock far behind: it is caught when it moves)
        if watch.members.get(claim.nonce, float("-inf")) >= claim.renewed - slack:
            continue  # renewing a Lease of this install in this cluster: a replica
        if not leases and claim.renewed <= first and claim.renewed <= mine.started:
            continue  # not renewed since this process started, nor while it watched
        found.append(claim)
    return found


def describe_rivals(mine: Claim, found: Collection[Claim]) -> str:
    """The conflict as a person reads it (no secret: ids, hosts, Leases)."""
    others = "; ".join(
        f"{c.host or '?'} (Lease {c.lease or 'none'}, kube-system uid {c.kube_uid or '?'}, "
        f"claim {c.nonce})"
        for c in sorted(found, key=lambda c: c.nonce)
    )
    return (
        f"another live operator claims this cluster's identity (cluster id {mine.cluster}, "
        f"install {mine.install}): {others}. Two clusters with one identity would take each "
        "other's instances for leaks, so no sweep, adoption or re-tag runs on either until one "
        "is given an identity of its own (a distinct --cluster-id / chart clusterId, or the "
        "default: its kube-system uid) or stopped; docs/shards.md, 'One identity, one cluster'"
    )


def read_holder(files: BackendFiles, stack: str) -> Holder | None:
    raw = read_if_present(files, f"{HOLDERS}{_safe(stack)}.json")
    if raw is None:
        return None
    try:
        return Holder.model_validate(json.loads(raw))
    except ValueError:
        return None  # half-written: its instances' cluster tag says who holds it


def write_holder(files: BackendFiles, stack: str, holder: Holder) -> None:
    files.write(f"{HOLDERS}{_safe(stack)}.json", holder.model_dump_json().encode())


def forget_holder(files: BackendFiles, stack: str) -> None:
    files.delete(f"{HOLDERS}{_safe(stack)}.json")


def takeover_refused(
    holder: str,
    mine: str,
    newest: float | None,
    now: float,
    after: float,
    named: Collection[str],
) -> str | None:
    """Why this cluster may not take a stack `holder` runs (None: it may): the holder is
    this cluster, or named by the admin as lost (`--take-over-from`), or its newest claim is
    older than `after` seconds (0: never by age). A holder that never claimed (an older
    release, or a cluster gone before this one) is taken only when named."""
    if holder == mine or holder in named:
        return None
    if newest is None:
        return (
            f"it is held by cluster {holder}, which has no claim in the backend (an older "
            "release, or long gone): name it in --take-over-from to take its stacks over"
        )
    age = now - newest
    if after > 0 and age > after:
        return None
    return (
        f"it is held by cluster {holder}, whose operator renewed its claim {age:.0f} s ago; "
        + (f"taken over automatically once that is older than {after:.0f} s, or " if after else "")
        + "name the cluster in --take-over-from once it is gone for good"
    )
