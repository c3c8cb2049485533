"""A namespace's limits (SpotpoolAccessPolicy.spec.limits) applied to one pool, through the
ledger of every policy that limits its namespace (the rules: spotpool.api.ledger; the ledger:
the policy's status, read and written at the API server with its resourceVersion).

A `Gate` is one pool's view of them for one operation: `hold` says how many instances it may
hold at once and, asked to reserve, raises its entry in every ledger to that before anything is
launched (a conflict reads again and decides again, so pools growing at once on any replica or
shard never pass a limit together); `settle` sets the entry to what the pool holds once a run
is over (lowered only then: the instances are gone); `retain` keeps a deleted pool's instances
counted; `release` drops a destroyed pool's entries. A pool is held at a limit, never cut below
what it runs."""

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from spotpool.api.access import Access, Hold, NamedPolicy, Use
from spotpool.api.ledger import EPSILON, Ask, Unit, grant, reservation, taken, widest
from spotpool.api.reservations import Reservation
from spotpool.api.spec import SpotpoolSpec
from spotpool_operator.reporting.kube import Cluster
from spotpool_operator.reporting.ledgers import Ledger

log = logging.getLogger(__name__)

ATTEMPTS = 12  # reads and conditional writes of one ledger before giving up (LedgerBusy)
GpuCounter = Callable[[Iterable[str]], Mapping[str, int]]


class LedgerBusy(Exception):
    """Every conditional write of a ledger met a newer version: nothing is reserved."""


def limiting(access: Access) -> list[NamedPolicy]:
    """The policies selecting the namespace that limit it, or that this operator does not
    understand (they may)."""
    return [p for p in access.policies if p.spec.limits is not None or p.problem is not None]


def fingerprint(access: Access) -> str:
    """What the namespace's limits are now, in one string: a held pool looks again when it
    changes (an admin raised a limit)."""
    return repr([(p.name, p.spec.limits, p.problem) for p in limiting(access)])


@dataclass(frozen=True)
class Gate:
    """One pool under its namespace's limits: `ask` says what it wants and holds; `count_gpus`
    counts the GPUs of instance types (the cloud's data; other pools' types, for those with no
    entry yet)."""

    cluster: Cluster
    access: Access
    ask: Ask
    count_gpus: GpuCounter

    def hold(self, want: int, reserve: bool = False) -> Hold:
        """How many instances (slots and surges) of `want` the pool may hold at once; with
        `reserve`, reserved in every limiting ledger before this returns."""
        ask = replace(self.ask, want=want)
        policies = limiting(self.access)
        if not policies:
            return Hold(want, "")
        for _ in range(ATTEMPTS):
            read = [self.cluster.read_ledger(p.name) for p in policies]
            ledgers = [ledger for ledger in read if ledger is not None]
            found = self._grant(ask, ledgers)
            if not reserve or all(self._raise(ledger, ask, found.count) for ledger in ledgers):
                return found
        raise LedgerBusy(f"the ledgers of {', '.join(p.name for p in policies)} kept changing")

    def _grant(self, ask: Ask, ledgers: list[Ledger]) -> Hold:
        found = Hold(ask.want, "")
        refused = self.access.not_understood()
        problem = next((ledger for ledger in ledgers if ledger.problem is not None), None)
        why = refused.message if refused is not None else ""
        if problem is not None and not why:
            why = (
                f"SpotpoolAccessPolicy {problem.policy} is not understood by this operator "
                f"({problem.problem})"
            )
        if why:
            count = min(ask.want, ask.floor)
            return Hold(count, f"held at {count} of {ask.want} instances: {why}")
        uses: dict[str, Use] | None = None
        for ledger in ledgers:
            if ledger.limits is None:
                continue
            if uses is None:  # once: the namespace's pools, for those with no entry yet
                uses = unledgered(self.cluster, ask.namespace, self.count_gpus)
            others = taken(ledger.entries, ask.namespace, ask.uid, uses)
            one = grant(ledger.policy, ledger.limits, ask, others)
            if one.count < found.count:
                found = one
        return found

    def overdrawn(self, count: int) -> str:
        """Why `count` instances of the pool's plan pass a cost or GPU limit although it runs
        that many now (its change makes each dearer, or of more GPUs): "" when they fit."""
        ask = replace(self.ask, want=count)
        for policy in limiting(self.access):
            ledger = self.cluster.read_ledger(policy.name)
            if ledger is None or ledger.limits is None:
                continue
            uses = unledgered(self.cluster, ask.namespace, self.count_gpus)
            others = taken(ledger.entries, ask.namespace, ask.uid, uses)
            entry, bound = reservation(ask, count), ledger.limits
            if bound.hourly_cost is not None and ask.unit.cost is not None:
                cost = round(others.hourly_cost + entry.hourly_cost, 6)
                if cost > bound.hourly_cost + EPSILON:
                    return (
                        f"its {count} instances would cost {entry.hourly_cost:g} an hour and the "
                        f"namespace's {cost:g}, past SpotpoolAccessPolicy {ledger.policy}'s "
                        f"{bound.hourly_cost:g}"
                    )
            gpus = others.gpus + entry.gpus
            if bound.gpus is not None and ask.unit.gpus is not None and gpus > bound.gpus:
                return (
                    f"its {count} instances would carry {entry.gpus} GPUs and the namespace's "
                    f"{gpus}, past SpotpoolAccessPolicy {ledger.policy}'s {bound.gpus}"
                )
        return ""

    def _raise(self, ledger: Ledger, ask: Ask, count: int) -> bool:
        """The pool's entry raised to `count` (never lowered here), over the version read."""
        if ledger.limits is None:
            return True
        previous = ledger.entries.get(ask.uid)
        entry = widest(reservation(ask, count, previous), previous)
        return entry == previous or self.cluster.write_ledger(ledger, {ask.uid: entry})

    def settle(self, count: int) -> None:
        """After a run: the entry says what the pool holds now and may keep (`count` slots and
        surges, never below what runs)."""
        self._set(lambda previous: reservation(self.ask, count, previous))

    def retain(self) -> None:
        """The pool is deleted with deletionPolicy Retain: what it runs stays reserved, marked
        retained, until the cluster admin removes the entry."""
        self._set(lambda previous: reservation(self.ask, self.ask.floor, previous).model_copy(
            update={"retained": True}))  # fmt: skip

    def _set(self, entry_of: Callable[[Reservation | None], Reservation]) -> None:
        for policy in limiting(self.access):
            _update(self.cluster, policy.name, self.ask.uid, entry_of, only_held=False)


def release(cluster: Cluster, uid: str) -> None:
    """A destroyed pool's entries removed from every policy's ledger (nothing of it runs)."""
    for policy in cluster.access_policies():
        _update(cluster, policy.name, uid, lambda previous: None, only_held=True)


def _update(
    cluster: Cluster, policy: str, uid: str,
    entry_of: Callable[[Reservation | None], Reservation | None], only_held: bool,
) -> None:  # fmt: skip
    for _ in range(ATTEMPTS):
        ledger = cluster.read_ledger(policy)
        if ledger is None or (ledger.limits is None and uid not in ledger.entries):
            return
        previous = ledger.entries.get(uid)
        if only_held and previous is None:
            return
        entry = entry_of(previous)
        if entry == previous or cluster.write_ledger(ledger, {uid: entry}):
            return
    raise LedgerBusy(f"the ledger of SpotpoolAccessPolicy {policy} kept changing")


def unledgered(cluster: Cluster, namespace: str, count_gpus: GpuCounter) -> dict[str, Use]:
    """Every pool of the namespace by uid, as its status says (for the pools with no entry in a
    ledger: they ran before the limit, or under an operator before ledgers): its slots or
    instances, whichever is more, and its surge instances."""
    pools = cluster.pools_in(namespace)
    listed = [i for p in pools for i in p.status.get("instances") or []]
    kinds = {str(i.get("instanceType") or "") for i in listed if i.get("gpus") is None}
    kinds |= {p.instance_types[0] for p in pools if p.instance_types}
    gpus = count_gpus(kinds) if kinds else {}
    found: dict[str, Use] = {}
    for pool in pools:
        instances = pool.status.get("instances") or []
        count = max(int(pool.status.get("replicas") or 0), len(instances))
        first = pool.instance_types[0] if pool.instance_types else ""
        counted = sum(
            int(i["gpus"]) if i.get("gpus") is not None else gpus.get(i.get("instanceType"), 0)
            for i in instances
        )
        counted += (count - len(instances)) * gpus.get(first, 0)
        surges = len(pool.status.get("surges") or [])
        cost = float(pool.status.get("hourlyCost") or 0.0)
        found[pool.uid] = Use(count + surges, counted, cost)
    return found


def held_spec(spec: SpotpoolSpec, count: int) -> SpotpoolSpec:
    """The spec with its desired count lowered to `count` (what the pool converges to)."""
    if count >= spec.desired_count():
        return spec
    return spec.model_copy(update={"replicas": count, "minimum": min(spec.minimum, count)})


__all__ = ["Ask", "Gate", "LedgerBusy", "Unit", "fingerprint", "held_spec", "limiting", "release"]
