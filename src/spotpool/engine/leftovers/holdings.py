"""What the state backend says is held — the backend outlives clusters, so it is the source of
truth the sweep of strays asks before any termination: every instance id any stack of the
backend holds (its checkpoint, and the fast path's launch intents beside it), and what the
Retain records name (their pools' uids, and since this version their instances too).

None when the backend cannot be read in full (not a self-managed one, a checkpoint in a form
read only by the CLI, a read that failed): then nothing can be proven unheld.
"""

import gzip
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from spotpool.api.stackconfig import PROJECT
from spotpool.engine.leftovers.retained import retained_records
from spotpool.engine.state.backend_files import ROOT, BackendFiles, open_backend

log = logging.getLogger(__name__)
LAUNCH_MARK = ".spotpool-launch"  # the fast path's intents (launches/launch_intents.py)


@dataclass(frozen=True)
class Holdings:
    instances: frozenset[str]  # held by a stack, or named by a Retain record
    kept: frozenset[str]  # uids of the pools deleted with Retain
    stacks: int  # how many stacks were read


def backend_holdings(backend_url: str) -> Holdings | None:
    """Every instance id the backend's stacks hold or its Retain records name; None when any
    of it could not be read."""
    files = open_backend(backend_url)
    if files is None:
        return None
    try:
        held: set[str] = set()
        stacks = 0
        for key in files.keys(f"{ROOT}/stacks/{PROJECT}/"):
            name = key.rsplit("/", 1)[-1]
            if name.endswith((".json", ".json.gz")):
                stacks += 1
                held |= _checkpoint_ids(files, key)
            elif name.endswith(".json.zst"):
                log.warning("stack file %s is zstd-compressed: the sweep cannot read it", name)
                return None
            elif LAUNCH_MARK in name and not name.endswith(".attrs"):
                held |= set(_ids_in(_json(files, key)))
        kept, named = retained_records(files)
    except Exception as error:  # a partial picture proves nothing
        log.warning("cannot read the state backend's stacks (%s): nothing is swept", error)
        return None
    return Holdings(frozenset(held | named), frozenset(kept), stacks)


def _checkpoint_ids(files: BackendFiles, key: str) -> set[str]:
    raw = _read(files, key)
    if raw is None:
        return set()  # removed since the listing: a deleted stack holds nothing
    if key.endswith(".gz"):
        raw = gzip.decompress(raw)
    latest = (json.loads(raw).get("checkpoint") or {}).get("latest") or {}
    return {
        str(resource["id"])
        for resource in latest.get("resources") or []
        if resource.get("id") and str(resource.get("type", "")).startswith("tencentcloud:")
    } | {
        str(pending.get("resource", {}).get("id"))
        for pending in latest.get("pending_operations") or []
        if pending.get("resource", {}).get("id")
    }


def _read(files: BackendFiles, key: str) -> bytes | None:
    try:
        return files.read(key)
    except FileNotFoundError:
        return None
    except Exception as error:
        if "NoSuchKey" in str(error):
            return None
        raise


def _json(files: BackendFiles, key: str) -> Any:
    raw = _read(files, key)
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None  # half-written by a kill: the orphan rules cover what it named


def _ids_in(value: Any) -> Iterator[str]:
    """Every `instance_id` a launch intent records (one slot's object, or a whole intent)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "instance_id" and isinstance(item, str) and item:
                yield item
            else:
                yield from _ids_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from _ids_in(item)
