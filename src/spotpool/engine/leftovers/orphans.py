"""What to do with a pool's orphans — instances tagged for the pool that its state does not
hold: one pure decision, adopt / terminate / leave alone, for each.

An orphan is usually what a killed run created but never recorded. It may also be another
writer's create still in flight (a second install on the same account, a person's
`pulumi up`, a restored backup), so terminating is the last resort and is fenced:

- only instances tagged with this install (or with no install tag: made before installs
  were tagged) are ever adopted or terminated;
- never an instance younger than the longest possible create, unless it belongs to a slot a
  killed run of this stack was creating (its pending create proves whose it is);
- only while this writer holds the stack and its Lease, and no other lock is on the stack;
- at most the pool's size per pass.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from spotpool.api.stackconfig import StackConfig

GONE_STATES = frozenset({"TERMINATING", "SHUTDOWN", "LAUNCH_FAILED"})


class Action(StrEnum):
    ADOPT = "adopt"
    TERMINATE = "terminate"
    LEAVE = "leave"


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

        if item.install is not None and item.install != situation.install_id:
            say(Action.LEAVE, f"made by another install ({item.install})", ours=False)
            continue  # (untagged: made before installs were tagged, by this pool's writer)
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


def waited_for(decisions: list[Decision]) -> list[Decision]:
    """What deleting the pool must wait for: its own install's instances a pass left alone
    (young, not this writer's to terminate now, over the cap). Terminated ones are going;
    another install's are that install's to delete."""
    return [d for d in decisions if d.action is Action.LEAVE and d.ours]


@dataclass(frozen=True)
class Fleet:
    """What the sweep of strays — instances of this install tagged for a pool that no longer
    exists — knows when it decides."""

    install_id: str
    pools: frozenset[str]  # uid of every Spotpool in the cluster, listed after the instances
    serves: Callable[[str], bool]  # this replica holds the shard (Lease) of that pool uid now
    now: datetime
    min_age: timedelta  # the grace: the longest a create can take between the cloud and a state
    cap: int  # terminations at most in one pass
    kept: frozenset[str] = frozenset()  # pools deleted with Retain: their instances stay


def decide_strays(fleet: Fleet, tagged: Mapping[str, list[Tagged]]) -> list[Decision]:
    """pool uid -> its tagged instances, as one fleet listing saw them; a decision for each
    instance whose pool is gone. A pool listed after the instances that is not there was
    deleted (a pool exists before anything is created for it), so its instances are strays:
    terminated when they are this install's, old enough, and this replica serves the pool's
    shard; never another install's, nor an untagged one (which install made it is unknown)."""
    decisions: list[Decision] = []
    for uid in sorted(tagged):
        if not uid or uid in fleet.pools:
            continue  # a live pool's orphans are its own writer's (`decide`)
        for item in sorted(tagged[uid], key=lambda i: i.instance_id):
            if item.state in GONE_STATES:
                continue
            terminating = sum(d.action is Action.TERMINATE for d in decisions)
            action, reason, ours = _stray(fleet, uid, item, terminating)
            decisions.append(
                Decision(item.instance_id, action, item.slot, item.instance_type, reason, ours, uid)
            )
    return decisions


def _stray(fleet: Fleet, uid: str, item: Tagged, terminating: int) -> tuple[Action, str, bool]:
    if item.install != fleet.install_id:
        made_by = f"another install ({item.install})" if item.install else "an unknown install"
        return Action.LEAVE, f"made by {made_by}", False
    if item.retained or uid in fleet.kept:
        return Action.LEAVE, "kept by its pool's deletion (deletionPolicy Retain)", False
    if not fleet.serves(uid):
        return Action.LEAVE, "the pool's shard is another replica's", True
    if item.created is None or fleet.now - item.created < fleet.min_age:
        return Action.LEAVE, "young: a create of the deleted pool may still be in flight", True
    if terminating >= fleet.cap:
        return Action.LEAVE, f"at most {fleet.cap} termination(s) a pass", True
    return Action.TERMINATE, f"its pool {uid} no longer exists", True
