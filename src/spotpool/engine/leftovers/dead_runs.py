"""The creates this install sent for a stack, written down before they left, kept in the
backend until a sweep has found them again: the proof that an instance of such a slot that the
state does not hold is ours, adopted or terminated at once instead of waiting out the orphan
grace (orphans.py).

Two sources of proof, one per object beside the checkpoint:

- `<stack>.spotpool-dead-run`: the slots a killed run was creating (its pending creates,
  recorded before the next operation clears them: that operation may itself be killed, or not
  be an `up`);
- `<stack>.spotpool-dead-run.<slot>-<ms>-<digest>`: one object per create a run sent, written
  by the API proxy before the RunInstances leaves (its slot, its ClientToken) and again with
  the instance ids once the cloud answered (write_safety.CreateJournal). A create whose answer
  was lost, whose run failed (a provider crash on a lagging listing) or was killed, is found
  again by the next operation; a pool's deletion terminates the ids it names directly, even
  before a lagging listing shows them.

A record is settled (removed) once its instances are in the state, or once a sweep ran at
least `LISTING_LAG` seconds after it was written (the listing showed whatever it made). At most
`MAX_OUTSTANDING` creates of one slot stand unsettled: another one is refused, and the run
fails with a code that says why (write_safety.TOO_MANY_CODE), never a wave of launches.
"""

import hashlib
import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from spotpool.api.stackconfig import PROJECT
from spotpool.engine.basics.stack_view import StackView
from spotpool.engine.state.backend_files import ROOT, BackendFiles, open_backend
from spotpool.engine.tencent.write_safety import CreateJournal, CreateRecord, OutstandingCreates

SUFFIX = ".spotpool-dead-run"
LISTING_LAG = 15.0  # seconds after a create by which any listing shows what it made
MAX_OUTSTANDING = 3  # unsettled creates of one slot, at most
_CREATE = re.compile(r"\.(\d+|x)-(\d+)-[0-9a-f]+$")


def _key(stack: str) -> str:
    return f"{ROOT}/stacks/{PROJECT}/{stack}{SUFFIX}"


def _files(pool: StackView) -> BackendFiles | None:
    return open_backend(pool.settings.backend_url)


@dataclass
class Unsettled:
    """What the backend holds for a stack: the slots to treat as proven ours, the instance
    ids its creates were answered with, and the objects read (to settle)."""

    slots: frozenset[int] = frozenset()
    ids: dict[str, int | None] = field(default_factory=dict)  # instance id -> slot
    creates: dict[str, float] = field(default_factory=dict)  # create record key -> written
    unanswered: dict[str, int | None] = field(default_factory=dict)  # read, no ids -> slot
    whole: bool = False  # the killed runs' object was there


def _create_keys(files: BackendFiles, stack: str) -> dict[str, tuple[int | None, float]]:
    """The stack's create records: key -> (slot, written), from their names alone."""
    prefix = _key(stack)
    found = {}
    for key in files.keys(prefix):
        match = _CREATE.fullmatch(key[len(prefix) :])
        if match:
            slot = int(match.group(1)) if match.group(1).isdigit() else None
            found[key] = (slot, int(match.group(2)) / 1000)
    return found


def read(pool: StackView, with_ids: bool = False) -> Unsettled:
    """The stack's unsettled proof (nothing when unreadable); `with_ids`: read each create
    record for the instance ids it was answered with (a deletion terminates them)."""
    files = _files(pool)
    if files is None:
        return Unsettled()
    slots: set[int] = set()
    whole = False
    try:
        listed = json.loads(files.read(_key(pool.name))).get("slots") or []
        slots |= {s for s in listed if isinstance(s, int) and s >= 0}
        whole = True
    except Exception:  # missing (the usual case), half-written or not ours: no proof
        pass
    found = Unsettled(whole=whole)
    for key, (slot, written) in _create_keys(files, pool.name).items():
        found.creates[key] = written
        if slot is not None:
            slots.add(slot)
        if with_ids:
            ids = _ids_in(files, key)
            for instance_id in ids:
                found.ids[instance_id] = slot
            if not ids and time.time() - written < LISTING_LAG:
                found.unanswered[key] = slot
    found.slots = frozenset(slots)
    return found


def _ids_in(files: BackendFiles, key: str) -> list[str]:
    try:
        ids = json.loads(files.read(key)).get("instanceIds") or []
    except Exception:
        return []
    return [i for i in ids if isinstance(i, str)]


def lag_left(records: Unsettled) -> float:
    """Seconds until every unanswered create of `records` is old enough for any listing to
    show what it made (0 when there is none)."""
    now = time.time()
    return max([LISTING_LAG - (now - records.creates[key]) for key in records.unanswered] + [0.0])


def recorded(pool: StackView) -> frozenset[int]:
    """The slots whose instances not in the state are proven ours (none if unreadable)."""
    return read(pool).slots


def record(pool: StackView, slots: frozenset[int]) -> None:
    """Keep `slots` (with any already recorded) before their pending creates are cleared."""
    files = _files(pool)
    if files is None or not slots:
        return
    known = slots | _whole_slots(files, pool.name)
    files.write(_key(pool.name), json.dumps({"slots": sorted(known)}).encode())


def _whole_slots(files: BackendFiles, stack: str) -> frozenset[int]:
    try:
        listed = json.loads(files.read(_key(stack))).get("slots") or []
    except Exception:
        return frozenset()
    return frozenset(s for s in listed if isinstance(s, int) and s >= 0)


def settle(pool: StackView, swept_at: float | None = None, held: Iterable[str] = ()) -> None:
    """A sweep ran with the proof at `swept_at` (epoch seconds; None: the stack is gone, so is
    every record): remove the killed runs' slots and each create record whose instances
    `held` (the state) holds, or that the sweep came late enough to see."""
    files = _files(pool)
    if files is None:
        return
    files.delete(_key(pool.name))
    held_ids = set(held)
    for key, (_, written) in _create_keys(files, pool.name).items():
        seen = swept_at is None or swept_at - written >= LISTING_LAG
        if seen or (held_ids and (ids := _ids_in(files, key)) and set(ids) <= held_ids):
            files.delete(key)


class BackendJournal(CreateJournal):
    """A stack's creates written down in its backend before they are sent (the API proxy)."""

    def __init__(self, pool: StackView) -> None:
        self.pool = pool
        self._keys: dict[str, str] = {}  # token -> its record's key

    def record(self, create: CreateRecord) -> None:
        files = _files(self.pool)
        if files is None:
            return  # Pulumi Cloud: nothing to keep it in; the orphan grace covers it
        if create.token in self._keys:
            return  # the provider sending the same create again: already written
        if create.slot is not None:
            others = [k for k, (s, _) in _create_keys(files, self.pool.name).items()
                      if s == create.slot]  # fmt: skip
            if len(others) >= MAX_OUTSTANDING:
                raise OutstandingCreates(
                    f"slot {create.slot} of stack {self.pool.name} has {len(others)} creates "
                    f"not yet found again (at most {MAX_OUTSTANDING}): the next operation "
                    "adopts or terminates what they made first"
                )
        slot = "x" if create.slot is None else str(create.slot)
        digest = hashlib.sha256(create.token.encode()).hexdigest()[:12]
        key = f"{_key(self.pool.name)}.{slot}-{int(time.time() * 1000)}-{digest}"
        self._keys[create.token] = key
        files.write(key, _body(create))

    def answered(self, create: CreateRecord) -> None:
        files = _files(self.pool)
        key = self._keys.get(create.token)
        if files is not None and key is not None:
            files.write(key, _body(create))


def _body(create: CreateRecord) -> bytes:
    return json.dumps(
        {
            "clientToken": create.token,
            "poolUid": create.pool_uid,
            "slot": create.slot,
            "instanceIds": create.instance_ids,
        }
    ).encode()
