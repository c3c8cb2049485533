"""What to do with a pool's orphans — instances tagged for the pool that its state does not
hold: one pure decision, adopt / terminate / leave alone, for each.

An orphan is usually what a killed run created but never recorded. It may also be another
writer's create still in flight (a second install on the same account, a person's
`pulumi up`, a restored backup), so terminating is the last resort and is fenced:

- only instances tagged with this install and this cluster (`owner_problem`) are ever adopted
  or terminated: an instance of another cluster or install, or one made before the cluster
  tag existed, is left alone (its stack's next run tags a held one; an orphan is reported);
- never an instance younger than the longest possible create, unless it belongs to a slot a
  killed run of this stack was creating (its pending create proves whose it is);
- only while this writer holds the stack and its Lease, and no other lock is on the stack;
- at most the pool's size per pass.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from spotpool.api.stackconfig import StackConfig, install_tag

GONE_STATES = frozenset({"TERMINATING", "SHUTDOWN", "LAUNCH_FAILED"})


class Action(StrEnum):
    ADOPT = "adopt"
    TERMINATE = "terminate"
    LEAVE = "leave"
    REPORT = "report"  # the sweep would terminate it, and only says so (--sweep report)


@dataclass(frozen=True)
class Tagged:
    """An instance the cloud lists with the pool's uid tag."""

    instance_id: str
    slot: int | None
    state: str
    instance_type: str
    zone: str
    install: str | None = None
    created: datetime | None = None
    retained: bool = False  # kept on purpose by a Retain deletion of its pool
    cluster: str | None = None  # the cluster whose operator made it (its tag)


@dataclass(frozen=True)
class Situation:
    config: StackConfig | None  # what the pool wants now; None: nothing (destroy)
    owned: Mapping[int, str]  # slot -> instance id, as the state holds them
    install_id: str
    may_terminate: bool  # this writer holds the stack and the Lease; no other lock is on it
    now: datetime
    min_age: timedelta  # the longest a create can take between the cloud and the state
    cap: int  # terminations at most in one pass (the pool's size)
    dead_run_slots: frozenset[int] = field(default_factory=frozenset)
    held: frozenset[str] = field(default_factory=frozenset)  # in the state, in no slot (surges)
    cluster_id: str | None = None  # this operator's cluster (None: run by hand, no cluster tag)


@dataclass(frozen=True)
class Decision:
    instance_id: str
    action: Action
    slot: int | None
    instance_type: str
    reason: str
    ours: bool = True  # made by this install: deleting the pool waits until it is gone
    pool_uid: str = ""  # the pool it is tagged for (set by `decide_strays`)


def decide(situation: Situation, tagged: list[Tagged]) -> list[Decision]:
    decisions: list[Decision] = []
    taken = set(situation.owned.values()) | situation.held
    adopting: set[int] = set()
    terminating = 0
    config = situation.config
    for item in sorted(tagged, key=lambda i: i.instance_id):
        if item.instance_id in taken or item.state in GONE_STATES:
            continue

        def say(action: Action, reason: str, item: Tagged = item, ours: bool = True) -> None:
            decisions.append(
                Decision(item.instance_id, action, item.slot, item.instance_type, reason, ours)
            )

        problem = owner_problem(item, situation.install_id, situation.cluster_id)
        if problem is not None:
            say(Action.LEAVE, problem, ours=False)
            continue
        from_dead_run = item.slot is not None and item.slot in situation.dead_run_slots
        young = item.created is None or situation.now - item.created < situation.min_age
        if young and not from_dead_run:
            say(Action.LEAVE, "young: another writer's create may still be in flight")
            continue
        slot = item.slot
        if (
            config is not None
            and slot is not None
            and slot < config.count
            and slot not in situation.owned
            and slot not in adopting
            and item.instance_type in config.instance_types
            and item.zone == config.zone_of(slot)  # a zone cannot change in place
        ):
            adopting.add(slot)
            say(Action.ADOPT, f"its slot {slot} is free")
            continue
        if not situation.may_terminate:
            say(Action.LEAVE, "this writer does not hold the stack and its Lease")
        elif terminating >= situation.cap:
            say(Action.LEAVE, f"at most {situation.cap} termination(s) a pass")
        else:
            terminating += 1
            say(Action.TERMINATE, "no slot of the pool wants it")
    return decisions


def owner_problem(item: Tagged, install_id: str, cluster_id: str | None) -> str | None:
    """Why the instance is not provably this operator's (None: it is): its install tag must
    name this install (the marked value; the unmarked one of earlier releases only with this
    cluster's tag, checked next) and its cluster tag this cluster (an operator run by hand,
    with no cluster id, owns only instances without a cluster tag)."""
    if item.install not in (install_tag(install_id), install_id):
        return (
            f"made by another install ({item.install})"
            if item.install
            else ("made by an unknown install (no spotpool-install tag)")
        )
    if item.cluster == cluster_id:
        return None
    if item.cluster is None:
        return (
            "no spotpool-cluster tag (made before this version, or by hand): reported, never "
            "terminated or adopted; a stack that holds it tags it at its next run"
        )
    return f"made by another cluster ({item.cluster})"


def waited_for(decisions: list[Decision]) -> list[Decision]:
    """What deleting the pool must wait for: its own install's instances a pass left alone
    (young, not this writer's to terminate now, over the cap). Terminated ones are going;
    another install's are that install's to delete."""
    return [d for d in decisions if d.action is Action.LEAVE and d.ours]
