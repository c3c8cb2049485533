"""Launch intents: what the storm fast path (fast_launch.py) launched beside Pulumi, kept
durably next to the stack's own files until the stack's next `up` adopts it.

One small JSON per slot launch in the stack's self-managed backend (file:// or s3://), at
`.pulumi/stacks/spotpool/<stack>.spotpool-launch.<slot>-<generation>` — beside
`<stack>.json.gz`, under a name the Pulumi CLI does not take for a stack. Written before any
RunInstances is sent (so a kill between the call and its reply still leaves the slot's
ClientToken and generation behind) and again with the instance id once the cloud answers —
only if it is still there. No secret is in it: the ClientToken, the generation (the nonce,
which is also a tag on the instance) and where the instance went.

Each launch is its own object, never part of a whole-file rewrite: a writer that stalled with
an old copy (a paused VM, a replica whose shard moved on) can only touch the launches it made
or read itself, never erase those the shard's next holder added. An intent stored whole by an
earlier release (`<stack>.spotpool-launch`) is still read, and removed once settled.
"""

import re
import time
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, Field

from spotpool.api.spec import ChargeType
from spotpool.api.stackconfig import PROJECT, StackConfig
from spotpool.engine.basics.errors import EngineError
from spotpool.engine.basics.stack_view import StackView
from spotpool.engine.state.backend_files import ROOT, BackendFiles, open_backend

SUFFIX = ".spotpool-launch"
PENDING: set[str] = set()  # stacks this process left an intent for (their next run must adopt)


class SlotLaunch(BaseModel):
    """One slot's fast-path instance: the request's identity and where it went."""

    client_token: str = Field(max_length=64, description="RunInstances' idempotency token.")
    generation: str = Field(description="Drawn per launch; the notice nonce when agents run.")
    nonce: str = Field("", description="The nonce tag and token's nonce ('' without an agent).")
    zone: str
    instance_type: str
    charge_type: ChargeType
    instance_id: str | None = Field(None, description="None until the cloud answered.")
    launched: float = Field(description="Epoch seconds the intent was written.")


class StoredLaunch(SlotLaunch):
    """One slot's launch as its own object in the backend."""

    pool_uid: str
    slot: int = Field(ge=0)


class LaunchIntent(BaseModel):
    """Every slot of one stack whose fast-path instance its state does not hold yet."""

    pool_uid: str
    slots: dict[int, SlotLaunch] = Field(default_factory=dict)
    stored: bool = Field(False, exclude=True, description="Read from the backend.")
    keys: dict[int, list[str]] = Field(
        default_factory=dict, exclude=True, description="The objects each slot was read from."
    )

    # -- what the next `up` does with it ---------------------------------------------------
    def without(self, slots: Iterable[int]) -> "LaunchIntent":
        """The intent less `slots` (their surge instance takes them: their fast-path instance,
        if any, is then an orphan like any other)."""
        gone = set(slots)
        return self.model_copy(
            update={"slots": {s: v for s, v in self.slots.items() if s not in gone}}
        )

    def stale_urns(self, urns: Mapping[int, str], owned: Mapping[int, str]) -> list[str]:
        """URNs of the slots whose state still holds an instance other than the launched one
        (the reclaimed one, most likely): a targeted refresh drops it if it is gone."""
        return [
            urns[s]
            for s, launch in sorted(self.slots.items())
            if s in urns and s in owned and owned[s] != launch.instance_id
        ]

    def free(self, owned: Mapping[int, str]) -> dict[int, SlotLaunch]:
        """The launches whose slot the state does not hold: adopt them."""
        return {s: launch for s, launch in self.slots.items() if s not in owned}

    def protected(self, owned: Mapping[int, str]) -> frozenset[str]:
        """Launched instances whose slot still holds another instance (the old one has not
        left the state yet): never terminated as orphans while the intent stands."""
        return frozenset(
            launch.instance_id
            for s, launch in self.slots.items()
            if s in owned and launch.instance_id and owned[s] != launch.instance_id
        )

    def placed(self, config: StackConfig, owned: Mapping[int, str]) -> StackConfig:
        """`config` with each free slot placed where its instance was launched (type, zone,
        charge), so that it is adopted as it is, never replaced."""
        free = {
            s: (launch.zone, launch.instance_type, launch.charge_type)
            for s, launch in self.free(owned).items()
            if s < config.count
        }
        return config.placing(free) if free else config

    def nonces(self, slots: Iterable[int]) -> dict[str, str]:
        """The generation each of `slots`' launched instance holds (config noticeNonces)."""
        return {
            str(s): self.slots[s].nonce for s in slots if s in self.slots and self.slots[s].nonce
        }

    def settled(self, held: Mapping[int, str], max_age: float, now: float) -> "LaunchIntent":
        """What stays after an `up` that ended holding `held` (slot -> id): only launches
        still protected (their slot held another instance) and younger than `max_age`; past
        it, the orphan rules take over (adopt into a free slot, else terminate)."""
        kept = {
            s: launch
            for s, launch in self.slots.items()
            if s in held
            and launch.instance_id
            and held[s] != launch.instance_id
            and now - launch.launched < max_age
        }
        return self.model_copy(update={"slots": kept})


def intent_key(stack: str) -> str:
    """The stack's intents' common prefix (and the key of an intent stored whole, as an
    earlier release did)."""
    return f"{ROOT}/stacks/{PROJECT}/{stack}{SUFFIX}"


def slot_key(stack: str, slot: int, launch: SlotLaunch) -> str:
    """One slot launch's own object."""
    return f"{intent_key(stack)}.{slot}-{launch.generation}"


_SLOT_NAME = re.compile(r"\.(\d+)-[0-9a-f]+$")


def backend_of(pool: StackView) -> BackendFiles:
    files = open_backend(pool.settings.backend_url)
    if files is None:
        raise EngineError(
            f"stack {pool.name}: the fast path keeps its launch intents in a self-managed "
            "backend (file:// or s3://), not in Pulumi Cloud"
        )
    return files


def _stored_keys(files: BackendFiles, stack: str) -> list[str]:
    """The stack's intent objects (one listing of its own prefix)."""
    whole = intent_key(stack)
    return [k for k in files.keys(whole) if k == whole or _SLOT_NAME.search(k[len(whole) :])]


def _read_launches(files: BackendFiles, key: str, pool_uid: str) -> dict[int, SlotLaunch]:
    """The launches one object holds (a whole intent of an earlier release, or one slot's);
    none when it is gone, half-written by a kill, or a deleted pool's namesake's."""
    try:
        raw = files.read(key)
    except Exception:  # removed meanwhile (NoSuchKey / FileNotFoundError): nothing pending
        return {}
    try:
        if not _SLOT_NAME.search(key):
            whole = LaunchIntent.model_validate_json(raw)
            return dict(whole.slots) if whole.pool_uid == pool_uid else {}
        one = StoredLaunch.model_validate_json(raw)
    except ValueError:
        return {}  # the orphan rules cover what it named
    if one.pool_uid != pool_uid:
        return {}
    return {one.slot: SlotLaunch.model_validate(one.model_dump(exclude={"pool_uid", "slot"}))}


def read_intent(pool: StackView) -> LaunchIntent:
    """The stack's launch intent; an empty one when there is none (or no self-managed
    backend: nothing can have been launched there). Of two launches for one slot (a writer's
    that stalled beside its successor's), the one the cloud answered, else the later."""
    files = open_backend(pool.settings.backend_url)
    intent = LaunchIntent(pool_uid=pool.pool.uid)
    if files is None:
        return intent
    for key in _stored_keys(files, pool.name):
        for slot, launch in _read_launches(files, key, pool.pool.uid).items():
            intent.keys.setdefault(slot, []).append(key)
            known = intent.slots.get(slot)
            if known is None or _rank(launch) > _rank(known):
                intent.slots[slot] = launch
    intent.stored = bool(intent.keys)
    return intent


def _rank(launch: SlotLaunch) -> tuple[bool, float]:
    return launch.instance_id is not None, launch.launched


def add_launch(pool: StackView, slot: int, launch: SlotLaunch) -> None:
    """Store one slot's new launch (before its RunInstances is sent)."""
    body = StoredLaunch(pool_uid=pool.pool.uid, slot=slot, **launch.model_dump())
    backend_of(pool).write(slot_key(pool.name, slot, launch), body.model_dump_json().encode())
    PENDING.add(pool.name)


def record_instance(pool: StackView, slot: int, launch: SlotLaunch) -> bool:
    """Store the instance id the cloud answered for the launch — only while its object is
    still there: one the shard's next holder settled or removed (its pool deleted) is not
    written back. False when it was gone."""
    files = backend_of(pool)
    key = slot_key(pool.name, slot, launch)
    if not _read_launches(files, key, pool.pool.uid):
        return False
    body = StoredLaunch(pool_uid=pool.pool.uid, slot=slot, **launch.model_dump())
    files.write(key, body.model_dump_json().encode())
    return True


def drop_launch(pool: StackView, slot: int, launch: SlotLaunch) -> None:
    """Remove one slot's launch (the cloud refused it: nothing was made)."""
    backend_of(pool).delete(slot_key(pool.name, slot, launch))


def write_intent(pool: StackView, intent: LaunchIntent) -> None:
    """Store each slot of the intent as its own object and remove the objects it was read
    from that it no longer names; objects it never read (another writer's) stay."""
    files = backend_of(pool)
    keep = set()
    for slot, launch in intent.slots.items():
        key = slot_key(pool.name, slot, launch)
        body = StoredLaunch(pool_uid=pool.pool.uid, slot=slot, **launch.model_dump())
        files.write(key, body.model_dump_json().encode())
        keep.add(key)
    _remove(files, {k for keys in intent.keys.values() for k in keys} - keep)
    if intent.slots:
        PENDING.add(pool.name)
    else:
        PENDING.discard(pool.name)


def _remove(files: BackendFiles, keys: Iterable[str]) -> None:
    for key in sorted(keys):
        files.delete(key)


def pending_stacks(backend_url: str) -> list[str]:
    """The stacks with a launch intent in this backend (one listing): after a restart or a
    shard move, the pools whose next `up` has fast-path instances to adopt."""
    files = open_backend(backend_url)
    if files is None:
        return []
    folder = f"{ROOT}/stacks/{PROJECT}/"
    stacks = set()
    for key in files.keys(folder):
        name, found, rest = key[len(folder) :].rpartition(SUFFIX)
        if found and "/" not in name and (not rest or _SLOT_NAME.fullmatch(rest)):
            stacks.add(name)
    return sorted(stacks)


def has_pending(pool: StackView) -> bool:
    """Whether the stack has a launch intent — this process's or any other writer's (a
    replica that held the pool's shard before, or a restarted one): one listing of the
    stack's own prefix when this process left none."""
    if pool.name in PENDING:
        return True
    files = open_backend(pool.settings.backend_url)
    return files is not None and bool(_stored_keys(files, pool.name))


def forget(pool: StackView) -> None:
    """Drop the stack's intent (the stack is destroyed or forgotten): every object of it."""
    files = open_backend(pool.settings.backend_url)
    if files is not None:
        _remove(files, _stored_keys(files, pool.name))
    PENDING.discard(pool.name)


def settle(pool: StackView, intent: LaunchIntent, held: Mapping[int, str]) -> None:
    """After an `up` that succeeded holding `held`: drop what it adopted or made moot — the
    objects this intent was read from, no other."""
    if not intent.stored:
        return  # nothing was pending when the up began
    kept = intent.settled(held, pool.settings.orphan_min_age, time.time())
    files = backend_of(pool)
    stays = {slot_key(pool.name, s, launch) for s, launch in kept.slots.items()}
    for s, launch in kept.slots.items():  # read from an intent stored whole: its own object
        if slot_key(pool.name, s, launch) not in intent.keys.get(s, []):
            add_launch(pool, s, launch)
    _remove(files, {k for keys in intent.keys.values() for k in keys} - stays)
    if not kept.slots:
        PENDING.discard(pool.name)
