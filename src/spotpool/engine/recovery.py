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
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulumi import automation as auto
from tencentcloud.cvm.v20170312 import cvm_client

from spotpool.engine import cloud
from spotpool.engine.errors import StackLockedError
from spotpool.engine.ownership import LockOwner, Writer, decide_lock

if TYPE_CHECKING:
    from spotpool.api.stackconfig import StackConfig
    from spotpool.engine.stack import PoolStack

GONE_STATES = {"TERMINATING", "SHUTDOWN", "LAUNCH_FAILED"}


def repair(pool: "PoolStack", stack: auto.Stack, state: Mapping[str, Any]) -> list[str]:
    """What was repaired, given the stack's current state; nothing to say if nothing was.
    What a killed run created but never recorded is an orphan: see `settle_orphans`."""
    notes = break_stale_locks(pool)
    pending = state.get("pending_operations") or []
    if pending:
        stack.refresh(clear_pending_creates=True, color="never", show_secrets=False)
        notes.append(f"cleared {len(pending)} pending operation(s) of a killed run")
    return notes


@dataclass
class Orphans:
    """The pool's tagged instances that its state does not hold, sorted out."""

    adoptable: dict[int, tuple[str, str]] = field(default_factory=dict)  # slot -> (id, type)
    terminated: list[str] = field(default_factory=list)

    def notes(self, adopted: str = "adopted") -> list[str]:
        """`adopted`: what happens to the adoptable ones ("adopted", "adopted by the next up")."""
        notes = [f"terminated {len(self.terminated)} orphaned instance(s): "
                 + ", ".join(self.terminated)] if self.terminated else []  # fmt: skip
        return notes + [
            f"orphaned instance {instance_id} of slot {slot} {adopted}"
            for slot, (instance_id, _) in sorted(self.adoptable.items())
        ]


def settle_orphans(
    pool: "PoolStack", config: "StackConfig | None", owned: Mapping[int, str]
) -> Orphans:
    """Find the instances tagged with this pool that its state (`owned`: slot -> id) does not
    hold. One per free slot of `config`, of one of its instance types and in the slot's zone,
    can be adopted (a spot GPU is scarce: keeping it beats asking for another); every other
    one is terminated. Call it only while holding the stack's lock, so no run of ours is
    between creating and recording one."""
    found = Orphans()
    taken = set(owned.values())
    client = _client(pool)
    for item in sorted(cloud.pool_instances(client, pool.pool.uid),
                       key=lambda item: item.instance_id):  # fmt: skip
        if item.instance_id in taken or item.state in GONE_STATES:
            continue
        slot = item.slot
        if (
            config is not None
            and slot is not None
            and slot < config.count
            and slot not in owned
            and slot not in found.adoptable
            and item.instance_type in config.instance_types
            and item.zone == config.zone_of(slot)  # a zone cannot change in place
        ):
            found.adoptable[slot] = (item.instance_id, item.instance_type)
        else:
            found.terminated.append(item.instance_id)
    if found.terminated:
        cloud.terminate(client, found.terminated)
    return found


def _client(pool: "PoolStack") -> cvm_client.CvmClient:
    return cloud.cvm(pool.credentials, pool.region, pool.settings.cloud_endpoint)


def mend_backend_files(pool: "PoolStack") -> list[str]:
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


def _file_backend_root(pool: "PoolStack") -> Path | None:
    """The `.pulumi` directory of a file backend; None for remote backends, whose files (and
    locks' owners) cannot be checked from here."""
    backend = pool.settings.backend_url
    if not backend.startswith("file://"):
        return None
    return Path(backend.removeprefix("file://")) / ".pulumi"


def break_stale_locks(pool: "PoolStack") -> list[str]:
    """Remove exactly the stack's lock files whose owners are provably gone (ownership.py);
    raise StackLockedError naming any other owner. Never `pulumi cancel`, which removes every
    lock, a live owner's too."""
    root = _file_backend_root(pool)
    if root is None:
        return []
    writer = pool.settings.writer or Writer(socket.gethostname(), os.getpid())
    now = datetime.now(UTC)
    notes, kept = [], []
    for lock_file in sorted((root / "locks").glob(f"**/{pool.name}/*.json")):
        try:
            owner = LockOwner.parse(
                str(lock_file.relative_to(root)), json.loads(lock_file.read_text())
            )
        except FileNotFoundError:
            continue  # its run just ended
        except (OSError, ValueError):
            kept.append(f"{lock_file.name} (unreadable)")
            continue
        decision = decide_lock(owner, writer, _alive)
        if not decision.break_it:
            kept.append(f"{owner.describe(now)}: {decision.reason}")
            continue
        lock_file.unlink(missing_ok=True)
        lock_file.with_name(lock_file.name + ".attrs").unlink(missing_ok=True)
        notes.append(f"removed the lock of {owner.describe(now)}: {decision.reason}")
    if kept:
        raise StackLockedError(
            f"stack {pool.name} is locked by " + "; ".join(kept) + " — not broken: wait for "
            "it to end, or if you know its owner is gone, `pulumi cancel --stack "
            f"{pool.name}` (pause the pool first)"
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
