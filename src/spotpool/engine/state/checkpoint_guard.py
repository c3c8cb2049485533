"""A late checkpoint save, undone before anything acts on it (`file://`, and `s3://` stores
that ignore `If-Match`).

On `s3://` each save of a fenced run is a conditional write (s3_fence.py): a late one is
refused by a store that honours the precondition (a store that ignores it, Tencent COS's PUT
Object documents none, lets it land: this module then undoes it as on `file://`). On `file://`
the CLI writes the checkpoint itself (fileblob: a temporary file beside it, renamed over it),
so there is no request to refuse: a CLI frozen mid-`up` whose lock the shard's next holder
broke, thawed later, renames its snapshot over the new holder's.
The new holder's state loses what it recorded (an adopted or a new instance), and its next
`up` would launch a second instance for the slot.

So once the writer has broken a lock whose CLI may still be alive on the stack (`exposed`: an
earlier holder's, or any lock it could not prove dead by its pid), it keeps the checkpoint as
its own last operation left it (`remember`, at the end of every operation) and checks the
checkpoint before every operation and every read of the state (`undo_late_save`):
a checkpoint that changed since its own last operation ended, while it held the pool's shard
throughout, can only be that late save — it puts its own back. Nothing is lost: the late
save's snapshot is kept beside it (`<checkpoint>.late-<ns>`) and the late run's instances,
if any, are orphans of the stack, adopted or terminated by the next `up` (recovery.py).

What this process knows is dropped when the pool's shard moves (`forget`, with the other
in-process memory of the stack): the next holder's writes are not late ones.
"""

import hashlib
import logging
import threading
import time
from dataclasses import dataclass

from minio.error import S3Error

from spotpool.api.stackconfig import PROJECT
from spotpool.engine.basics.stack_view import StackView
from spotpool.engine.state.backend_files import ROOT, BackendFiles, open_backend

log = logging.getLogger(__name__)
SUFFIXES = (".json.gz", ".json", ".json.zst")


@dataclass(frozen=True)
class _Left:
    key: str
    digest: str
    data: bytes


_left: dict[str, _Left] = {}  # stack -> its checkpoint as this process's last operation left it
_exposed: set[str] = set()  # stacks whose lock this process broke under a possibly live CLI
_guard = threading.Lock()
undone = 0  # late saves put right since this process started (a figure for the benches)


def _files(pool: StackView) -> BackendFiles | None:
    return open_backend(pool.settings.backend_url)


def _current(files: BackendFiles, stack: str) -> tuple[str, bytes] | None:
    for suffix in SUFFIXES:
        key = f"{ROOT}/stacks/{PROJECT}/{stack}{suffix}"
        try:
            return key, files.read(key)
        except FileNotFoundError:
            continue
        except S3Error as error:
            if error.code != "NoSuchKey":
                raise
    return None


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def exposed(pool: StackView) -> None:
    """This process broke a lock on the stack whose CLI may still be alive (frozen): a late
    save of it is looked for from now on."""
    if _files(pool) is not None:
        with _guard:
            _exposed.add(pool.name)


def remember(pool: StackView) -> None:
    """The checkpoint as this process's operation leaves it (its CLI runs are over)."""
    with _guard:
        watched = pool.name in _exposed
    files = _files(pool) if watched else None
    if files is None:
        return
    found = _current(files, pool.name)
    with _guard:
        if found is None:
            _left.pop(pool.name, None)
        else:
            key, data = found
            _left[pool.name] = _Left(key, _digest(data), data)


def undo_late_save(pool: StackView) -> list[str]:
    """Before an operation or a read of the state: a late save over this process's checkpoint
    is put right (the late one kept beside it); what was done, if anything."""
    global undone
    with _guard:
        left = _left.get(pool.name) if pool.name in _exposed else None
    files = _files(pool) if left is not None else None
    if left is None or files is None:
        return []
    found = _current(files, pool.name)
    if found is None or (found[0] == left.key and _digest(found[1]) == left.digest):
        return []
    key, late = found
    files.write(f"{key}.late-{time.time_ns()}", late)
    if key != left.key:
        files.delete(key)
    files.write(left.key, left.data)
    with _guard:
        undone += 1
    note = (
        f"undid a late checkpoint save over stack {pool.name} (a CLI whose lock this writer "
        "broke, thawed after it took the pool over); its snapshot is kept beside the checkpoint"
    )
    log.warning("%s", note)
    return [note]


def forget(stack: str) -> None:
    """The pool's shard moved: another writer's saves are not late ones."""
    with _guard:
        _left.pop(stack, None)
        _exposed.discard(stack)
