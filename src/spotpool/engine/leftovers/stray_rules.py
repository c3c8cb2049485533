"""What the sweep of strays — instances tagged for a pool that no longer exists — may do with
each one: one pure decision, terminate / report / leave, and the bookkeeping of when a pool
counts as gone.

Ownership is proven, never assumed. An instance is terminated only when all of these hold:

- it carries this install's id and this cluster's identity (`owner_problem`): never another
  cluster's or install's, never one without the cluster tag (made before this version);
- no Retain deletion kept it (its tag, or a record naming its pool or the instance itself);
- no stack of the state backend holds it (a pool re-created under a new uid, or a cluster
  rebuilt against the same backend, takes its stack back: its instances are not strays), and
  the backend could be read in full;
- its pool was missing from two listings at least the grace apart (`Missing`): the time the
  pool has been missing, never the instance's age; a listing that failed or was partial
  counts as "every pool alive";
- this replica serves the pool's shard, the sweep terminates (`--sweep terminate`), and the
  pass's cap (one for the whole install) is not reached;
- the backend's read is plausible (`doubt` is None: engine/leftovers/holdings.py) and the
  instance was made after the install's marker in it (`trusted_since`): otherwise what would
  go is only reported, with the reason.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from spotpool.engine.leftovers.orphans import (
    GONE_STATES,
    Action,
    Decision,
    Tagged,
    owner_problem,
)


@dataclass
class Missing:
    """When each pool uid was first seen missing from a listing, since its last sighting."""

    since: dict[str, datetime] = field(default_factory=dict)

    def observe(self, candidates: Iterable[str], alive: set[str] | None, now: datetime) -> None:
        """One listing: `alive` is the candidates it found (None: the listing failed or was
        partial, so every pool counts as alive and every clock starts again)."""
        if alive is None:
            self.since.clear()
            return
        for uid in candidates:
            if uid in alive:
                self.since.pop(uid, None)
            else:
                self.since.setdefault(uid, now)

    def gone(self, now: datetime, grace: timedelta) -> frozenset[str]:
        """The pools missing from two listings at least `grace` apart."""
        return frozenset(uid for uid, first in self.since.items() if now - first >= grace)

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the uids no instance carries any more (their instances went)."""
        wanted = set(keep)
        for uid in [u for u in self.since if u not in wanted]:
            del self.since[uid]


@dataclass(frozen=True)
class Fleet:
    """What the sweep knows when it decides."""

    install_id: str
    cluster_id: str | None
    missing: Mapping[str, datetime]  # pool uid -> first listing that lacked it (`Missing`)
    gone: frozenset[str]  # pools missing from two listings at least the grace apart
    serves: Callable[[str], bool]  # this replica holds the shard (Lease) of that pool uid now
    cap: int  # terminations left in this pass for this account (each account has its own)
    kept: frozenset[str] = frozenset()  # pools deleted with Retain, by the backend's records
    # Instance ids any stack of the backend holds, or a Retain record names; None: the backend
    # could not be read in full (nothing is terminated then).
    held: frozenset[str] | None = frozenset()
    terminate: bool = True  # --sweep terminate; False: report what would go
    # Why the backend's read cannot prove an instance unheld (None: it can): report only.
    doubt: str | None = None
    # The install's marker in the backend: an instance made before it is only reported.
    trusted_since: datetime | None = None


def decide_strays(fleet: Fleet, tagged: Mapping[str, list[Tagged]]) -> list[Decision]:
    """pool uid -> its tagged instances, as one fleet listing saw them; a decision for each
    live instance whose pool was missing from the last listing."""
    decisions: list[Decision] = []
    going = 0
    for uid in sorted(tagged):
        if not uid or uid not in fleet.missing:
            continue  # a live pool's orphans are its own writer's (`orphans.decide`)
        for item in sorted(tagged[uid], key=lambda i: i.instance_id):
            if item.state in GONE_STATES:
                continue
            action, reason, ours = _stray(fleet, uid, item, going)
            going += action is Action.TERMINATE
            decisions.append(
                Decision(item.instance_id, action, item.slot, item.instance_type, reason, ours, uid)
            )
    return decisions


def _stray(fleet: Fleet, uid: str, item: Tagged, going: int) -> tuple[Action, str, bool]:
    problem = owner_problem(item, fleet.install_id, fleet.cluster_id)
    if problem is not None:
        return Action.LEAVE, problem, False
    if item.retained or uid in fleet.kept:
        return Action.LEAVE, "kept by its pool's deletion (deletionPolicy Retain)", False
    if fleet.held is None:
        return Action.LEAVE, "the state backend could not be read in full: not swept", True
    if item.instance_id in fleet.held:
        return (
            Action.LEAVE,
            "a stack of the state backend holds it (its pool's stack, taken back by a pool "
            "re-created under a new uid or a rebuilt cluster), or a Retain record names it",
            False,
        )
    if not fleet.serves(uid):
        return Action.LEAVE, "the pool's shard is another replica's", True
    if uid not in fleet.gone:
        return Action.LEAVE, "its pool is missing from one listing, not yet two a grace apart", True
    if not fleet.terminate:
        return Action.REPORT, f"its pool {uid} no longer exists (--sweep report)", True
    doubt = fleet.doubt or _made_before(fleet, item)
    if doubt is not None:
        return Action.REPORT, f"its pool {uid} no longer exists, but {doubt}", True
    if going >= fleet.cap:
        return Action.LEAVE, "the pass's cap of terminations is reached", True
    return Action.TERMINATE, f"its pool {uid} no longer exists", True


def _made_before(fleet: Fleet, item: Tagged) -> str | None:
    since = fleet.trusted_since
    if since is None or (item.created is not None and item.created >= since):
        return None
    when = since.strftime("%Y-%m-%d %H:%M:%S")
    return (
        f"it was made before this install's marker in the state backend ({when}Z): a stack "
        "of the backend written until then (another URL or prefix?) may hold it"
    )


def would_go(fleet: Fleet, tagged: Mapping[str, list[Tagged]]) -> bool:
    """Whether any instance would be terminated (or reported) were no stack holding it: the
    backend's holdings are read only then."""
    unheld = replace(fleet, held=frozenset(), cap=max(1, fleet.cap))
    return any(d.action in (Action.TERMINATE, Action.REPORT) for d in decide_strays(unheld, tagged))
