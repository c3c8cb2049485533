"""Launch intents: what the storm fast path (fast_launch.py) launched beside Pulumi, kept
durably next to the stack's own files until the stack's next `up` adopts it.

One small JSON per stack in its self-managed backend (file:// or s3://), at
`.pulumi/stacks/spotpool/<stack>.spotpool-launch` — beside `<stack>.json.gz`, under a suffix
the Pulumi CLI does not take for a stack. Written before any RunInstances is sent (so a kill
between the call and its reply still leaves the slot's ClientToken and generation behind) and
again with each instance id once the cloud answers. No secret is in it: the ClientToken, the
generation (the nonce, which is also a tag on the instance) and where the instance went.
"""

import json
import time
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, Field

from spotpool.api.spec import ChargeType
from spotpool.api.stackconfig import PROJECT, StackConfig
from spotpool.engine.backend_files import ROOT, BackendFiles, open_backend
from spotpool.engine.errors import EngineError
from spotpool.engine.stack_view import StackView

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


class LaunchIntent(BaseModel):
    """Every slot of one stack whose fast-path instance its state does not hold yet."""

    pool_uid: str
    slots: dict[int, SlotLaunch] = Field(default_factory=dict)
    stored: bool = Field(False, exclude=True, description="Read from the backend.")

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
    return f"{ROOT}/stacks/{PROJECT}/{stack}{SUFFIX}"


def backend_of(pool: StackView) -> BackendFiles:
    files = open_backend(pool.settings.backend_url)
    if files is None:
        raise EngineError(
            f"stack {pool.name}: the fast path keeps its launch intents in a self-managed "
            "backend (file:// or s3://), not in Pulumi Cloud"
        )
    return files


def read_intent(pool: StackView) -> LaunchIntent:
    """The stack's launch intent; an empty one when there is none (or no self-managed
    backend: nothing can have been launched there)."""
    files = open_backend(pool.settings.backend_url)
    empty = LaunchIntent(pool_uid=pool.pool.uid)
    if files is None:
        return empty
    try:
        raw = files.read(intent_key(pool.name))
    except Exception:  # missing (NoSuchKey / FileNotFoundError): nothing pending
        return empty
    try:
        intent = LaunchIntent.model_validate_json(raw)
    except ValueError:
        return empty  # half-written by a kill: the orphan rules cover what it named
    if intent.pool_uid != pool.pool.uid:
        return empty  # a deleted pool's namesake
    return intent.model_copy(update={"stored": True})


def write_intent(pool: StackView, intent: LaunchIntent) -> None:
    """Store the intent whole (or delete it when it names no slot)."""
    files = backend_of(pool)
    if not intent.slots:
        files.delete(intent_key(pool.name))
        PENDING.discard(pool.name)
        return
    PENDING.add(pool.name)
    body = intent.model_dump(mode="json")
    files.write(intent_key(pool.name), json.dumps(body, sort_keys=True).encode())


def pending_stacks(backend_url: str) -> list[str]:
    """The stacks with a launch intent in this backend (one listing): after a restart or a
    shard move, the pools whose next `up` has fast-path instances to adopt."""
    files = open_backend(backend_url)
    if files is None:
        return []
    folder = f"{ROOT}/stacks/{PROJECT}/"
    return sorted(
        key[len(folder) : -len(SUFFIX)] for key in files.keys(folder) if key.endswith(SUFFIX)
    )


def forget(pool: StackView) -> None:
    """Drop the stack's intent (the stack is destroyed or forgotten)."""
    files = open_backend(pool.settings.backend_url)
    if files is not None:
        files.delete(intent_key(pool.name))
    PENDING.discard(pool.name)


def settle(pool: StackView, intent: LaunchIntent, held: Mapping[int, str]) -> None:
    """After an `up` that succeeded holding `held`: drop what it adopted or made moot."""
    if not intent.stored:
        return  # nothing was pending when the up began
    write_intent(pool, intent.settled(held, pool.settings.orphan_min_age, time.time()))
