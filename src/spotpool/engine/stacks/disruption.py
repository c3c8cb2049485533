"""Bounded voluntary disruption: which slots a change replaces, and in which batches.

Pure planning, no Pulumi: `replaced_slots` reads a preview's per-instance steps, and
`plan_batches` splits the replaced slots into batches of at most maxUnavailable + maxSurge.
In each batch, up to maxSurge slots are replaced create-before-delete (the stack program's
default: the new instance is made before the old one goes) and the rest, at most
maxUnavailable, delete-before-create (their old instance goes first), so the pool never holds
more than count + maxSurge instances and never lacks more than maxUnavailable of its slots.
Slots marked do-not-disrupt go last, in the last batches.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from spotpool.engine.basics.results import REPLACING
from spotpool.engine.state.urns import slot_of_urn

# The Spotpool annotation listing the slots to disrupt last, for example "3,5".
DO_NOT_DISRUPT = "devops.jokerbai.com/do-not-disrupt"


@dataclass(frozen=True)
class Batch:
    """One step of a rollout: `surge` slots are replaced create-before-delete, `delete_first`
    slots lose their old instance before the new one is made."""

    surge: tuple[int, ...]
    delete_first: tuple[int, ...]

    @property
    def slots(self) -> list[int]:
        return sorted((*self.surge, *self.delete_first))


def replaced_slots(steps: Iterable[tuple[str, str]]) -> list[int]:
    """Slots whose instance a change replaces, from a preview's (urn, op) instance steps
    (surge instances, `…-slot-N-surge`, are not slots and are left out)."""
    slots: set[int] = set()
    for urn, op in steps:
        slot = slot_of_urn(urn)
        if op in REPLACING and slot is not None:
            slots.add(slot)
    return sorted(slots)


def parse_do_not_disrupt(value: str | None) -> frozenset[int]:
    """The slots of a do-not-disrupt annotation ("3,5", spaces allowed); anything that is not
    a slot number is ignored."""
    parts = (part.strip() for part in (value or "").split(","))
    return frozenset(int(part) for part in parts if part.isdigit())


def plan_batches(
    replaced: Iterable[int],
    max_unavailable: int,
    max_surge: int,
    protected: Iterable[int] = (),
    rank: Mapping[int, int] | None = None,
) -> list[Batch]:
    """Batches of at most max_unavailable + max_surge slots, in slot order (or by `rank`,
    lowest first: the operator ranks a node pool's slots emptiest node first), the `protected`
    (do-not-disrupt) slots last; in each batch the first max_surge slots surge."""
    if max_unavailable < 0 or max_surge < 0 or max_unavailable + max_surge == 0:
        raise ValueError("maxUnavailable and maxSurge must be >= 0 and not both 0")
    kept, ranks = set(protected), rank or {}
    slots = sorted(set(replaced), key=lambda s: (s in kept, ranks.get(s, 0), s))
    size = max_unavailable + max_surge
    batches: list[Batch] = []
    for start in range(0, len(slots), size):
        chunk = slots[start : start + size]
        surge = min(max_surge, len(chunk))
        batches.append(Batch(surge=tuple(chunk[:surge]), delete_first=tuple(chunk[surge:])))
    return batches


def batch_count(
    replaced: Iterable[int], max_unavailable: int, max_surge: int, protected: Iterable[int] = ()
) -> int:
    """How many batches the change takes (0: it replaces nothing)."""
    return len(plan_batches(replaced, max_unavailable, max_surge, protected))
