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

from collections.abc import Mapping
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
