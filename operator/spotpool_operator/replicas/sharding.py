"""Which replica serves which pool: pools hash onto a fixed number of shards, and the shards are
divided among the live replicas. Pure functions, no Kubernetes: shards.py holds the Leases.

- A pool's shard is a stable hash of its uid (the same in every replica and every release).
- `assign` divides the shards among the replicas so each holds its share (the shard count
  divided by the replica count, the first few one more), moving as few shards as it can: a
  replica keeps what it holds up to its share, and only the rest (a dead replica's shards, a
  crowded replica's surplus, never-held shards) go to replicas below their share.
"""

import hashlib
import re
from collections.abc import Iterable, Mapping

MEMBER_INFIX = "-member-"
SHARD_INFIX = "-shard-"


def shard_of(uid: str, shards: int) -> int:
    """The pool's shard: the first 8 bytes of sha256(uid), modulo the shard count."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, not {shards}")
    return int.from_bytes(hashlib.sha256(uid.encode()).digest()[:8], "big") % shards


def shard_lease_name(base: str, shards: int, shard: int) -> str:
    """One shard is the single Lease of before (its name unchanged); more are `<base>-shard-i`."""
    return base if shards == 1 else f"{base}{SHARD_INFIX}{shard}"


def member_lease_name(base: str, hostname: str) -> str:
    """A replica's membership Lease: `<base>-member-<hostname>`, made a valid object name."""
    label = re.sub(r"[^a-z0-9-]+", "-", hostname.lower()).strip("-") or "replica"
    return f"{base}{MEMBER_INFIX}{label}"[:253].rstrip("-")


def of_install(base: str, name: str) -> bool:
    """A Lease of this install: the single Lease, a shard Lease (whatever the shard count), or
    a membership Lease."""
    if name == base or name.startswith(base + MEMBER_INFIX):
        return True
    return name.startswith(base + SHARD_INFIX) and name[len(base + SHARD_INFIX) :].isdigit()


def quotas(shards: int, members: Iterable[str], held: Mapping[str, int]) -> dict[str, int]:
    """Each member's share: shards // n, and one more for the first shards % n members —
    those holding the most already (fewer moves), ties by name."""
    ordered = sorted(set(members), key=lambda m: (-held.get(m, 0), m))
    if not ordered:
        return {}
    base, extra = divmod(shards, len(ordered))
    return {member: base + (1 if rank < extra else 0) for rank, member in enumerate(ordered)}


def assign(
    shards: int, current: Mapping[int, str | None], members: Iterable[str]
) -> dict[int, str]:
    """shard -> member that should hold it, given `current` (shard -> its live holder, or None)
    and the live members. Deterministic: every replica that sees the same Leases agrees."""
    alive = sorted(set(members))
    if not alive:
        return {}
    holding: dict[str, list[int]] = {m: [] for m in alive}
    for shard in range(shards):
        holder = current.get(shard)
        if holder in holding:
            holding[holder].append(shard)
    share = quotas(shards, alive, {m: len(s) for m, s in holding.items()})
    result: dict[int, str] = {}
    loose: list[int] = []
    for member in alive:
        kept, surplus = holding[member][: share[member]], holding[member][share[member] :]
        result.update({shard: member for shard in kept})
        loose += surplus
    loose += [s for s in range(shards) if current.get(s) not in holding]
    loose.sort(reverse=True)
    for member in alive:
        for _ in range(share[member] - len(holding[member][: share[member]])):
            result[loose.pop()] = member
    return result


def moves(before: Mapping[int, str], after: Mapping[int, str]) -> int:
    """How many shards change hands between two assignments."""
    return sum(1 for shard, member in after.items() if before.get(shard) != member)
