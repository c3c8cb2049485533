"""What the state backend says is held — the backend outlives clusters, so it is the source of
truth the sweep of strays asks before any termination: every instance id any stack of the
backend holds (its checkpoint, and the fast path's launch intents beside it), and what the
Retain records name (their pools' uids, and since this version their instances too).

A read that lists nothing proves nothing by itself: the backend must be plausible. Its layout
is one Pulumi writes (project mode, `meta.yaml` version 1, or the older flat layout without
it: every stack under `.pulumi/stacks/` is read, either way), a directory it cannot list is an
error (never an empty listing), and the install's marker (install_marker.py) says since when
the backend is this install's. Otherwise `doubt` says why, and the sweep only reports.

None when the backend is not a self-managed one: nothing can be proven unheld.
"""

import gzip
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

from spotpool.api.stackconfig import PROJECT
from spotpool.engine.leftovers.install_marker import marked_since
from spotpool.engine.leftovers.retained import retained_records
from spotpool.engine.state.backend_files import ROOT, BackendFiles, open_backend, read_if_present

log = logging.getLogger(__name__)
LAUNCH_MARK = ".spotpool-launch"  # the fast path's intents (launches/launch_intents.py)
CHECKPOINTS = (".json", ".json.gz")


@dataclass(frozen=True)
class Holdings:
    instances: frozenset[str]  # held by a stack, or named by a Retain record
    kept: frozenset[str]  # uids of the pools deleted with Retain
    stacks: frozenset[str] = frozenset()  # the project's stacks read, by name
    since: datetime | None = None  # the install's marker: the backend is its own since then
    doubt: str | None = None  # why this read cannot prove an instance unheld (None: it can)


def backend_holdings(backend_url: str, install_id: str | None = None) -> Holdings | None:
    """Every instance id the backend's stacks hold or its Retain records name, with `doubt`
    set when the read proves nothing unheld; None for a backend that is not self-managed.
    `install_id`: the install whose marker must be there (None: not asked)."""
    try:
        files = open_backend(backend_url)
    except ValueError as error:  # a URL read otherwise than Pulumi reads it
        return _doubtful(f"the backend URL is refused ({error})")
    if files is None:
        return None
    try:
        layout = _layout(files)
        if layout is None:
            return _doubtful("its layout is not one Pulumi writes (.pulumi/meta.yaml)")
        held: set[str] = set()
        stacks: set[str] = set()
        for key in files.keys(f"{ROOT}/stacks/"):  # both layouts: every project's stacks
            name = key.rsplit("/", 1)[-1]
            if name.endswith(CHECKPOINTS):
                held |= _checkpoint_ids(files, key)
                where = key.removeprefix(f"{ROOT}/stacks/").removesuffix(name)
                if where in ("", f"{PROJECT}/"):  # a Spotpool stack (flat, or project mode)
                    stacks.add(name.removesuffix(".gz").removesuffix(".json"))
            elif name.endswith(".json.zst"):
                return _doubtful(
                    f"stack file {name} is zstd-compressed: this release cannot read it"
                )
            elif LAUNCH_MARK in name and not name.endswith(".attrs"):
                held |= set(_ids_in(_json(files, key)))
        kept, named = retained_records(files)
        since = marked_since(files, install_id) if install_id else None
    except Exception as error:  # a partial picture proves nothing
        log.warning("cannot read the state backend's stacks (%s): nothing is swept", error)
        return _doubtful(f"its stacks could not be read in full ({type(error).__name__}: {error})")
    doubt = None
    if install_id and since is None:
        doubt = (
            f"it has no marker of install {install_id} (written at the install's first start "
            "there): not the backend this install has been writing (a wrong URL or prefix?)"
        )
    return Holdings(frozenset(held | named), frozenset(kept), frozenset(stacks), since, doubt)


def _doubtful(why: str) -> Holdings:
    return Holdings(frozenset(), frozenset(), doubt=f"the state backend proves nothing: {why}")


def _layout(files: BackendFiles) -> str | None:
    """The layout: `project` (meta.yaml version 1), `flat` (Pulumi's older one: no meta.yaml),
    or None for anything else (a version this release does not know)."""
    raw = read_if_present(files, f"{ROOT}/meta.yaml")
    if raw is None:
        return "flat"
    meta = yaml.safe_load(raw)
    version = meta.get("version") if isinstance(meta, dict) else None
    return {0: "flat", 1: "project"}.get(version) if isinstance(version, int) else None


def _checkpoint_ids(files: BackendFiles, key: str) -> set[str]:
    raw = read_if_present(files, key)
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


def _json(files: BackendFiles, key: str) -> Any:
    raw = read_if_present(files, key)
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
