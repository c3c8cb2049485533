"""Whose stack this is, checked before every run that could adopt, re-tag or terminate (the
operation frame calls `check`; Retain's forget and the fast path too).

A run is refused when another live operator claims this cluster's identity (`conflict`, the
operator's claims: leftovers/claims.py), and when the stack is another cluster's: its holder
record in the backend names it, or — a stack recorded before holder records — its instances'
cluster tag does. Another cluster's stack is taken over only when the admin named that cluster
(`take_over_from`) or its newest claim is older than `take_over_after`; the holder record then
names this cluster, and the run that follows re-tags the instances.

A backend whose files are not ours to read (Pulumi Cloud) keeps no holder records: there,
Pulumi Cloud's own organisation scoping is what separates clusters.
"""

import logging
import threading
import time
from collections.abc import Callable, Collection
from typing import Protocol

from spotpool.api.stackconfig import PROJECT
from spotpool.engine.basics.errors import IdentityConflict, StackHeldByAnotherCluster
from spotpool.engine.leftovers.claims import (
    Holder,
    forget_holder,
    newest_claim,
    read_holder,
    takeover_refused,
    write_holder,
)
from spotpool.engine.state.backend_files import ROOT, open_backend
from spotpool.engine.state.backend_files import latest_deployment as _latest
from spotpool.engine.state.stack_state import cluster_in

log = logging.getLogger(__name__)
CHECKED_FOR = 60.0  # seconds a stack proven this cluster's is not read again


class NamedStack(Protocol):
    """What the guard needs of a stack: its name (a PoolStack is one)."""

    @property
    def name(self) -> str: ...


class StackOwnership:
    def __init__(
        self,
        backend_url: str,
        cluster_id: str,
        conflict: Callable[[], str | None],
        take_over_from: Collection[str] = (),
        take_over_after: float = 0.0,
        kube_uid: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend_url, self.cluster_id, self.kube_uid = backend_url, cluster_id, kube_uid
        self.conflict, self.clock = conflict, clock
        self.take_over_from = frozenset(take_over_from)
        self.take_over_after = take_over_after
        self._checked: dict[str, float] = {}  # stack -> when proven this cluster's
        self._lock = threading.Lock()

    def check(self, pool: NamedStack) -> str | None:
        why = self.conflict()
        if why is not None:
            raise IdentityConflict(why)
        now = self.clock()
        with self._lock:
            if now - self._checked.get(pool.name, float("-inf")) < CHECKED_FOR:
                return None
        files = open_backend(self.backend_url)
        if files is None:
            return None
        record = read_holder(files, pool.name)
        holder = record.cluster if record is not None else None
        if holder != self.cluster_id:
            state = _latest(files, PROJECT, pool.name)
            if holder is None and state is not None:
                holder = cluster_in(state)  # recorded before holder records: its tag says
            if state is None and not files.keys(f"{ROOT}/stacks/{PROJECT}/{pool.name}.json"):
                holder = None  # no stack: a stale record holds nothing
        note = None
        if holder not in (None, self.cluster_id):
            assert holder is not None
            newest = newest_claim(files, holder)
            refused = takeover_refused(
                holder, self.cluster_id, newest, now, self.take_over_after, self.take_over_from
            )
            if refused is not None:
                raise StackHeldByAnotherCluster(
                    holder, f"stack {pool.name} is not this cluster's to run: {refused}"
                )
            how = "named in --take-over-from" if holder in self.take_over_from else (
                f"its last claim is {now - newest:.0f} s old" if newest else "")  # fmt: skip
            note = f"took stack {pool.name} over from cluster {holder} ({how})"
            log.warning("%s", note)
        if record is None or record.cluster != self.cluster_id:
            write_holder(files, pool.name, Holder(cluster=self.cluster_id, kube_uid=self.kube_uid,
                                                  since=now))  # fmt: skip
        with self._lock:
            self._checked[pool.name] = now
        return note

    def release(self, pool: NamedStack) -> None:
        with self._lock:
            self._checked.pop(pool.name, None)
        files = open_backend(self.backend_url)
        if files is not None:
            forget_holder(files, pool.name)
