"""An identity claim in the cloud account (issue 48): the claim of claims.py as a tag key/value
pair of its own, so an operator on **another state backend** that tags instances with the same
cluster id and install (a copied `clusterId`) sees it, and the other way round.

Key `spotpool-claim-<cluster id>`; one value per live process: `1;<renewed>;<nonce>;<install>;
<kube-system uid>` (the format's version, epoch seconds of its clock, its Lease identity). The
tag service's limits (product doc 651/13354): a key of at most 127 characters, a value of at
most 255, letters, digits and `+ - = . _ : / @ ( ) [ ] , ; > <`; so each field is itself when
plain and short, else its digest, and `;` separates them. A value is renewed every
`RENEW_EVERY` seconds (a new value, then the old one deleted); one not renewed for
`STALE_AFTER` is a stopped process's, deleted by whoever sees it.

Pure: encoding, decoding, and what a read of the key's values holds.
"""

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from spotpool.engine.leftovers.claims import Claim

KEY_PREFIX = "spotpool-claim-"
RENEW_EVERY = 30.0  # seconds between two renewals in one account (2 writes; 20/s allowed)
STALE_AFTER = 3 * RENEW_EVERY  # three renewals missed: no longer live, and deleted
FORMAT = "1"
FROM_CLOUD = "another operator (its claim in the cloud account's tags)"
_PLAIN = r"[A-Za-z0-9._:/@()\[\],<>+=-]"


def field_of(value: str, limit: int = 80) -> str:
    """`value` as one field of a claim's tag: itself when plain and at most `limit` long, else
    `h-` and its digest (a field never holds `;`, the separator)."""
    if re.fullmatch(f"{_PLAIN}{{1,{limit}}}", value) and not value.startswith("h-"):
        return value
    return "h-" + hashlib.sha256(value.encode()).hexdigest()[:24]


def claim_key(cluster: str) -> str:
    return KEY_PREFIX + field_of(cluster, 127 - len(KEY_PREFIX))


def encode(claim: Claim) -> str:
    """At most 1 + 10 + 3 x 80 + 4 = 255 characters (a kube-system uid is 36)."""
    fields = (FORMAT, str(int(claim.renewed)), field_of(claim.nonce), field_of(claim.install),
              field_of(claim.kube_uid or "-", 80))  # fmt: skip
    return ";".join(fields)[:255]


def decode(cluster: str, value: str) -> Claim | None:
    """The claim a value says, or None (another format, or not ours)."""
    parts = value.split(";")
    if len(parts) != 5 or parts[0] != FORMAT or not parts[1].isdigit():
        return None
    renewed = float(parts[1])
    return Claim(
        cluster=cluster, install=parts[3], nonce=parts[2],
        kube_uid=None if parts[4] == "-" else parts[4], host=FROM_CLOUD,
        started=renewed, renewed=renewed, live_for=STALE_AFTER,
    )  # fmt: skip


@dataclass
class Read:
    """What one read of the key's values holds for a claimant."""

    others: list[Claim] = field(default_factory=list)  # live, the newest value of each nonce
    stale: list[str] = field(default_factory=list)  # values to delete: nobody renews them
    own: list[str] = field(default_factory=list)  # this claimant's values but its current one


def sort_values(
    cluster: str, values: Iterable[str], mine: str, current: str | None, now: float
) -> Read:
    """A read of `claim_key(cluster)`'s values, by the claimant whose nonce is `mine` and whose
    last written value is `current`."""
    read = Read()
    newest: dict[str, Claim] = {}
    for value in values:
        claim = decode(cluster, value)
        if claim is None:
            continue  # a value of another format: left as it is
        if claim.nonce == field_of(mine):
            if value != current:
                read.own.append(value)
            continue
        if now - claim.renewed > STALE_AFTER:
            read.stale.append(value)
            continue
        if claim.nonce not in newest or newest[claim.nonce].renewed < claim.renewed:
            newest[claim.nonce] = claim
    read.others = sorted(newest.values(), key=lambda c: c.nonce)
    return read
