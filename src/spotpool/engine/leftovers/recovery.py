"""Repair what a killed run left behind, before the next operation on the stack.

- a lock whose owner is provably gone (ownership.py: an earlier holder of the operator's Lease,
  or a dead process of this host) is removed, that file alone; any other lock is reported;
- pending creates are cleared.

What an interrupted create left in the cloud, an instance with the pool's tags that the state
does not hold (an orphan), is adopted into its slot by the next `up`, or terminated when no slot
wants it, so nothing leaks.
"""

import json
import os
import socket
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pulumi import automation as auto
from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException
from tencentcloud.cvm.v20170312 import cvm_client

from spotpool.api.stackconfig import PROJECT, StackConfig
from spotpool.engine.basics.errors import EngineError, StackLockedError
from spotpool.engine.basics.stack_view import StackView
from spotpool.engine.fencing.ownership import STALE_MARGIN, LockOwner, Writer, decide_lock
from spotpool.engine.fencing.processes import current_fence
from spotpool.engine.leftovers import dead_runs
from spotpool.engine.leftovers.orphans import (
    GONE_STATES,
    Action,
    Decision,
    Situation,
    Tagged,
    decide,
)
from spotpool.engine.state import checkpoint_guard
from spotpool.engine.state.backend_files import (
    ROOT,
    BackendFiles,
    FileBackend,
    file_root,
    latest_deployment,
    open_backend,
)
from spotpool.engine.state.urns import slot_of_urn
from spotpool.engine.tencent import cloud
from spotpool.engine.tencent.recent_writes import RECENT

__all__ = ["GONE_STATES", "Orphans", "repair", "sweep_orphans"]
CATCH_UP = 30.0  # seconds a sweep waits for a lagging listing to show what was launched


def repair(pool: StackView, stack: auto.Stack, state: Mapping[str, Any]) -> list[str]:
    """What was repaired, given the stack's current state; nothing to say if nothing was.
    What a killed run created but never recorded is an orphan: see `sweep_orphans`."""
    notes = break_stale_locks(pool)
    pending = state.get("pending_operations") or []
    if pending:
        dead_runs.record(pool, pending_slots(state))  # the proof outlives the pending creates
        stack.refresh(clear_pending_creates=True, color="never", show_secrets=False)
        notes.append(f"cleared {len(pending)} pending operation(s) of a killed run")
    return notes


@dataclass
class Orphans:
    """What one sweep decided about the pool's orphans."""

    adoptable: dict[int, tuple[str, str]] = field(default_factory=dict)  # slot -> (id, type)
    terminated: list[Decision] = field(default_factory=list)
    left: list[Decision] = field(default_factory=list)

    def notes(
        self, adopted: str = "adopted", planned: Mapping[int, str | None] | None = None
    ) -> list[str]:
        """`adopted`: what happens to the adoptable ones ("adopted", "adopted by the next up");
        `planned`: slot -> the instance launched for it beside Pulumi (the fast path), whose
        adoption is the plan, not a recovery: not said here."""
        planned = planned or {}
        return (
            [f"terminated orphaned instance {d.instance_id}: {d.reason}" for d in self.terminated]
            + [
                f"orphaned instance {instance_id} of slot {slot} {adopted}"
                for slot, (instance_id, _) in sorted(self.adoptable.items())
                if planned.get(slot) != instance_id
            ]
            + [f"left orphaned instance {d.instance_id} alone: {d.reason}" for d in self.left]
        )


def sweep_orphans(
    pool: StackView,
    config: StackConfig | None,
    owned: Mapping[int, str],
    cap: int,
    dead_run_slots: frozenset[int] = frozenset(),
    held: frozenset[str] = frozenset(),
    expected: frozenset[str] = frozenset(),
) -> Orphans:
    """Find the instances tagged with this pool that its state (`owned`: slot -> id) does not
    hold, decide each (orphans.py) and terminate the ones decided so. `held`: more ids the
    state holds outside the slots (surge instances). `expected`: instances launched for the
    pool beside Pulumi (the fast path's): a listing that lags behind their launch is asked
    again, within the read-your-writes bound, so they are adopted, not made again. Call it only
    while holding the stack's in-process lock, so no run of ours is between creating and
    recording one; another writer's lock on the stack stops every termination."""
    client = _client(pool)
    tagged = _listed(client, pool.pool.uid, expected)
    writer = pool.settings.writer
    holds_lease = writer is None or writer.lease is None or writer.lease.held()
    situation = Situation(
        config=config,
        owned=owned,
        install_id=pool.settings.install_id,
        may_terminate=holds_lease and not _any_lock(pool),
        now=datetime.now(UTC),
        min_age=timedelta(seconds=pool.settings.orphan_min_age),
        cap=max(1, cap),
        dead_run_slots=dead_run_slots,
        held=held,
        cluster_id=pool.settings.cluster_id,
    )
    found = Orphans()
    for decision in decide(situation, tagged):
        if decision.action is Action.ADOPT and decision.slot is not None:
            found.adoptable[decision.slot] = (decision.instance_id, decision.instance_type)
        elif decision.action is Action.TERMINATE:
            found.terminated.append(decision)
        else:
            found.left.append(decision)
    if found.terminated:  # fenced where it is sent, as every other write
        cloud.terminate(client, [d.instance_id for d in found.terminated], pool_fence(pool))
    return found


def _listed(client: cvm_client.CvmClient, uid: str, expected: frozenset[str]) -> list[Tagged]:
    """The pool's instances, once every launch of `expected` this process saw answered shows
    (or CATCH_UP seconds passed: then the sweep decides on what it has)."""
    deadline, pause = time.monotonic() + CATCH_UP, 0.5
    while True:
        listed = cloud.pool_instances(client, uid)
        late = RECENT.unlisted(expected - {i.instance_id for i in listed})
        if not late or time.monotonic() + pause > deadline:
            break
        time.sleep(pause)
        pause = min(2.0, pause * 2)
    return [
        Tagged(
            instance_id=i.instance_id, slot=i.slot, state=i.state, instance_type=i.instance_type,
            zone=i.zone, install=i.install, created=i.created, cluster=i.cluster,
        )
        for i in listed
    ]  # fmt: skip


def terminate_recorded(pool: StackView, ids: Mapping[str, int | None]) -> list[str]:
    """Terminate, by id, the instances this install's creates for the pool were answered with
    (dead_runs.py): its own beyond doubt, whether a lagging listing shows them yet or not.
    One call each: one already gone must not fail the others."""
    client = _client(pool)
    notes = []
    for instance_id, slot in sorted(ids.items()):
        try:
            cloud.terminate(client, [instance_id], pool_fence(pool))
        except TencentCloudSDKException as error:
            if "NotFound" not in str(error.code or ""):
                raise
            continue  # gone already (the destroy took it, or the cloud did)
        notes.append(f"terminated instance {instance_id} of slot {slot}: a create of this install")
    return notes


def unanswered_creates(records: dead_runs.Unsettled, swept: Orphans) -> list[Decision]:
    """Creates sent a moment ago whose answer never came and whose instance the sweep did not
    find (a slot's terminated orphans account for its records first): what they made may not
    be listed yet, so a deletion waits for the listing (dead_runs.LISTING_LAG at most)."""
    found = Counter(d.slot for d in swept.terminated)
    waiting = []
    for slot in records.unanswered.values():
        if found[slot] > 0:
            found[slot] -= 1
            continue
        waiting.append(
            Decision(
                f"(a create of slot {slot}, its answer lost)",
                Action.LEAVE,
                slot,
                "",
                f"listed within {dead_runs.LISTING_LAG:.0f} s of its create",
            )
        )
    return waiting


def pool_fence(pool: StackView) -> Callable[[], None]:
    """The writer's right to write this pool, checked right before a launch or a termination
    is sent, from any thread: its Lease still held and the calling operation's fence (the
    shard, in the same epoch) passed."""
    writer = pool.settings.writer
    operation = current_fence()

    def fence() -> None:
        if writer is not None and writer.lease is not None and not writer.lease.held():
            raise EngineError(f"stack {pool.name}: this writer lost the pool's Lease")
        operation()

    return fence


def _any_lock(pool: StackView) -> bool:
    """Another run holds the stack's Pulumi lock right now (checked just before terminating;
    a backend whose files cannot be listed from here counts as locked)."""
    files = open_backend(pool.settings.backend_url)
    return files is None or bool(_lock_keys(files, pool.name))


def pending_slots(state: Mapping[str, Any]) -> frozenset[int]:
    """Slots a killed run was creating: its pending creates in the state name them."""
    slots = set()
    for pending in state.get("pending_operations") or []:
        resource = pending.get("resource") or {}
        slot = slot_of_urn(str(resource.get("urn", "")))
        if slot is not None and pending.get("type") == "creating":
            slots.add(slot)
    return frozenset(slots)


def _client(pool: StackView) -> cvm_client.CvmClient:
    return cloud.cvm(pool.credentials, pool.region, pool.settings.cloud_endpoint)


def mend_backend_files(pool: StackView) -> list[str]:
    """A file backend keeps each file's metadata in a `.attrs` file beside it, written in
    place after the file itself went to a temporary name: a kill in between leaves it empty,
    and Pulumi then cannot even select the stack ("failed to load checkpoint: EOF"). The
    metadata is optional (content type and checksum), so a broken one is removed."""
    root = _file_backend_root(pool)
    if root is None:
        return []
    name = pool.name
    patterns = (f"stacks/**/{name}.json*.attrs", f"locks/**/{name}/*.attrs",
                f"history/**/{name}/*.attrs")  # fmt: skip
    notes = []
    for attrs in (path for pattern in patterns for path in root.glob(pattern)):
        try:
            json.loads(attrs.read_text())
            continue
        except ValueError:
            attrs.unlink()
        except OSError:
            continue
        notes.append(f"removed the half-written backend file {attrs.name} of a killed run")
    return notes


def prune_history(pool: StackView) -> list[str]:
    """Keep the stack's last `history_keep` updates in the backend's history (each is a
    history entry and a full checkpoint copy): without this, every operation adds ~18 KiB
    per 2-instance pool for ever. Says nothing: pruning is housekeeping, not a repair."""
    files = open_backend(pool.settings.backend_url)
    keep = pool.settings.history_keep
    if files is None or keep <= 0:
        return []
    entries: dict[str, list[str]] = {}
    for key in files.keys(_stack_dir("history", pool.name)):
        directory, _, name = key.rpartition("/")
        if directory.rsplit("/", 1)[-1] != pool.name or name.endswith(".attrs"):
            continue
        # <stack>-<unix nanoseconds>.history.json[.gz] and .checkpoint.json[.gz]
        stamp = name.removeprefix(f"{pool.name}-").split(".", 1)[0]
        if stamp.isdigit():
            entries.setdefault(stamp, []).append(key)
    for stamp in sorted(entries, key=int)[:-keep]:
        for key in entries[stamp]:
            files.delete(key)
    return []


def _file_backend_root(pool: StackView) -> Path | None:
    """The `.pulumi` directory of a file backend; None for remote backends, whose files (and
    locks' owners) cannot be checked from here."""
    backend = pool.settings.backend_url
    if not backend.startswith("file://"):
        return None
    return file_root(backend) / ".pulumi"


def read_checkpoint(pool: StackView) -> Mapping[str, Any] | None:
    """The stack's latest deployment as its checkpoint file holds it (plain, gzip or zstd
    aside: plain and gzip), or None when there is none to read here."""
    files = open_backend(pool.settings.backend_url)
    return None if files is None else latest_deployment(files, PROJECT, pool.name)


def _stack_dir(kind: str, stack: str) -> str:
    """Where a project-scoped self-managed backend keeps one stack's locks or history: listing
    just that prefix keeps each operation's cost independent of the number of stacks."""
    return f"{ROOT}/{kind}/organization/{PROJECT}/{stack}/"


def _lock_keys(files: BackendFiles, stack: str, suffix: str = ".json") -> list[str]:
    return [
        key
        for key in files.keys(_stack_dir("locks", stack))
        if key.endswith(suffix) and key.rsplit("/", 2)[-2] == stack
    ]


def _remove_half_written_locks(files: BackendFiles, stack: str) -> list[str]:
    """A file backend writes a lock as `<id>.json.<hex>.tmp` beside it, then renames it into
    place: a CLI killed in between (a lost shard's kill, a timeout) leaves the temporary file,
    which Pulumi counts as a lock for good ("locked by 1 lock(s)"). It never is one: removing
    it is safe even under a live writer, whose rename then fails and its run takes no lock."""
    notes = []
    for key in _lock_keys(files, stack, ".tmp"):
        files.delete(key)
        notes.append(f"removed the half-written lock file {key.rsplit('/', 1)[-1]} of a killed run")
    return notes


def break_stale_locks(pool: StackView) -> list[str]:
    """Remove exactly the stack's lock files whose owners are provably gone (ownership.py), on
    a file or an S3 backend; raise StackLockedError naming any other owner. Never `pulumi
    cancel`, which removes every lock, a live owner's too."""
    files = open_backend(pool.settings.backend_url)
    if files is None:
        return []
    writer = pool.settings.writer or Writer(socket.gethostname(), os.getpid())
    now = datetime.now(UTC)
    limit = timedelta(seconds=pool.settings.operation_timeout)  # every run is killed by then
    # Only fileblob writes through a temporary file (s3 uploads in one request): no listing more.
    on_disk = isinstance(files, FileBackend)
    notes, kept = _remove_half_written_locks(files, pool.name) if on_disk else [], []
    for key in _lock_keys(files, pool.name):
        try:
            owner = LockOwner.parse(key, json.loads(files.read(key)))
        except (OSError, ValueError) as error:
            if isinstance(error, FileNotFoundError) or "NoSuchKey" in str(error):
                continue  # its run just ended
            kept.append(f"{key.rsplit('/', 1)[-1]} (unreadable)")
            continue
        decision = decide_lock(owner, writer, _alive, now, limit)
        if not decision.break_it:
            kept.append(f"{owner.describe(now)}: {decision.reason}")
            continue
        files.delete(key)
        notes.append(f"removed the lock of {owner.describe(now)}: {decision.reason}")
        if not (owner.hostname == writer.hostname and owner.pid and not _alive(owner.pid)):
            checkpoint_guard.exposed(pool)  # its CLI may be frozen, and save when thawed
    if kept:
        raise StackLockedError(
            f"stack {pool.name} is locked by " + "; ".join(kept) + " — not broken: wait for "
            "it to end (a lock taken before this replica held the pool's shard is broken once "
            f"older than any run can be, {int((limit + STALE_MARGIN).total_seconds())} s), or "
            f"if you know its owner is gone, `pulumi cancel --stack {pool.name}` (pause the "
            "pool first)"
        )
    return notes


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed process nobody has reaped yet is a zombie: gone for our purpose
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")
