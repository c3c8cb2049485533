"""Repair what a killed run left behind, before the next operation on the stack.

- a lock whose owner is provably gone (this host, pid not alive) is removed (`pulumi cancel`);
- pending creates are cleared, and then every instance that carries the pool's tags but is
  not in the state (the cloud half of an interrupted create) is terminated, so nothing leaks.
"""

import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulumi import automation as auto
from tencentcloud.cvm.v20170312 import cvm_client

from spotpool.engine import cloud

if TYPE_CHECKING:
    from spotpool.engine.stack import PoolStack

GONE_STATES = {"TERMINATING", "SHUTDOWN", "LAUNCH_FAILED"}


def repair(pool: "PoolStack", stack: auto.Stack, state: Mapping[str, Any]) -> list[str]:
    """What was repaired, given the stack's current state; nothing to say if nothing was."""
    notes = _break_stale_locks(pool)
    if notes:
        stack.cancel()
    pending = state.get("pending_operations") or []
    if pending:
        stack.refresh(clear_pending_creates=True, color="never", show_secrets=False)
        notes.append(f"cleared {len(pending)} pending operation(s) of a killed run")
    if notes:  # a run was killed: what it created but never recorded must not leak
        notes += terminate_orphans(pool)
    return notes


def terminate_orphans(pool: "PoolStack", owned: set[str] | None = None) -> list[str]:
    """Terminate the pool's tagged instances that its state does not hold. Call it only while
    holding the stack's lock, so no run of ours is between creating and recording one."""
    orphans = find_orphans(pool, owned)
    if not orphans:
        return []
    cloud.terminate(_client(pool), orphans)
    return [f"terminated {len(orphans)} orphaned instance(s): {', '.join(orphans)}"]


def find_orphans(pool: "PoolStack", owned: set[str] | None = None) -> list[str]:
    """Instances tagged with this pool that its state does not hold (`owned`, read from the
    state when not given)."""
    if owned is None:
        owned = set(pool.state_instance_ids().values())
    return [
        item.instance_id
        for item in cloud.pool_instances(_client(pool), pool.pool.uid)
        if item.instance_id not in owned and item.state not in GONE_STATES
    ]


def _client(pool: "PoolStack") -> cvm_client.CvmClient:
    return cloud.cvm(pool.credentials, pool.region, pool.settings.cloud_endpoint)


def _break_stale_locks(pool: "PoolStack") -> list[str]:
    backend = pool.settings.backend_url
    if not backend.startswith("file://"):
        return []  # remote backends: a lock's owner cannot be checked from here
    lock_root = Path(backend.removeprefix("file://")) / ".pulumi" / "locks"
    notes = []
    for lock_file in lock_root.glob(f"**/{pool.name}/*.json"):
        try:
            owner = json.loads(lock_file.read_text())
        except (OSError, ValueError):
            return []  # unreadable: leave it to a person
        pid, host = owner.get("pid"), owner.get("hostname")
        if host != socket.gethostname() or not isinstance(pid, int) or _alive(pid):
            return []  # a live (or unknowable) owner: `pulumi cancel` would remove its lock too
        notes.append(f"removed the lock of stopped process {pid}")
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
