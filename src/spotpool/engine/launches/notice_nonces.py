"""Each instance's generation: a nonce drawn when the instance is created, bound into its
termination-notice token (spotpool.api.notices.slot_token) and kept for its whole life.

The stack program renders the nonce into the instance's user data (with the token made from
it) and into its tag `spotpool-notice-nonce`, so the two always agree and the state says which
nonce each instance holds. Before each run the engine plans the nonces: an instance the state
holds keeps its own (changing it would change its user data: a replacement), a slot or surge
instance about to be created gets a fresh one, and a promoted surge instance keeps the one it
was made with. So the token an earlier instance of a slot held (readable from its user data by
anyone who may read instance attributes) is worthless for the slot's next instance.

An instance made before generations has no tag: it keeps the slot's nonce-less token.

The same plan carries the instance a surge instance replaces (`"3-surge@previous"`: slot 3's
instance when the surge is made), rendered into the surge's user data and its tag
`spotpool-previous-instance`, and kept by it once promoted (`"3@previous"`), for the same
reason as its nonce: its user data must not change.
"""

import json
import secrets
from collections.abc import Iterable, Mapping
from typing import Any

from spotpool.api.notices import NONCE_TAG, PREVIOUS_TAG, SURGE_SUFFIX

INSTANCE_TYPE = "tencentcloud:Instance/instance:Instance"


def new_nonce() -> str:
    return secrets.token_hex(8)


def surge_key(slot: int) -> str:
    return f"{slot}{SURGE_SUFFIX}"


def previous_key(key: str) -> str:
    return f"{key}@previous"


def held_nonces(state: Mapping[str, Any]) -> dict[str, str]:
    """The nonce of every instance the state holds, by its key (`"3"`: slot 3's instance,
    `"3-surge"`: its surge instance); "" for one made before generations. And the previous
    instance of each: its tag's, or for a slot's surge instance yet to be made, the slot's."""
    held: dict[str, str] = {}
    derived: dict[str, str] = {}
    tagged: dict[str, str] = {}
    for resource in state.get("resources") or []:
        if resource.get("type") != INSTANCE_TYPE or not resource.get("id"):
            continue
        name = str(resource.get("urn", "")).rsplit("::", 1)[-1]
        _, sep, key = name.rpartition("-slot-")
        if not sep or not key.removesuffix(SURGE_SUFFIX).isdigit():
            continue
        tags = (resource.get("outputs") or {}).get("tags") or {}
        held[key] = str(tags.get(NONCE_TAG) or "") if isinstance(tags, dict) else ""
        if key.isdigit():  # what a surge of this slot made now would replace
            derived[previous_key(surge_key(int(key)))] = str(resource["id"])
        if isinstance(tags, dict) and tags.get(PREVIOUS_TAG):
            tagged[previous_key(key)] = str(tags[PREVIOUS_TAG])
    # A surge instance the state holds keeps what it was made with (none, if made before
    # previous ids: a new one would change its user data, a replacement).
    derived = {k: v for k, v in derived.items() if k.removesuffix("@previous") not in held}
    return {**held, **derived, **tagged}


def plan_nonces(
    held: Mapping[str, str],
    count: int,
    surge: Iterable[int] = (),
    promote: Iterable[int] = (),
    fresh: Iterable[int] = (),
) -> dict[str, str]:
    """The nonce of each instance the run declares: its own for one the state holds, the
    surge instance's for a promoted slot, a new one for anything created (and for `fresh`
    slots: their instance is gone and the run makes the next one)."""
    promoted, renewed = set(promote), set(fresh)
    nonces: dict[str, str] = {}
    for slot in range(count):
        key = str(slot)
        if slot in promoted:
            nonces[key] = held.get(surge_key(slot), "")
            previous = held.get(previous_key(surge_key(slot)))
        elif key in held and slot not in renewed:
            nonces[key] = held[key]
            previous = held.get(previous_key(key))
        else:
            nonces[key] = new_nonce()
            previous = None
        if previous:
            nonces[previous_key(key)] = previous
    for slot in sorted(set(surge)):
        key = surge_key(slot)
        nonces[key] = held[key] if key in held else new_nonce()
        if held.get(previous_key(key)):
            nonces[previous_key(key)] = held[previous_key(key)]
    return nonces


def config_value(nonces: Mapping[str, str]) -> str:
    """As the stack config `spotpool:noticeNonces` holds them."""
    return json.dumps(dict(sorted(nonces.items())))
