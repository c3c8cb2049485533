"""This process's claim of its identity (engine/leftovers/claims.py), renewed every few
seconds in the state backend, and the verdict every sweep, adoption and re-tag waits on.

The claim is written before the operator serves anything and checked again right before each
sweep pass; a process that cannot write or read it holds too (no verdict, no proof). Who is a
member of this install in this cluster is read from the install's Leases here: their holders
and when each last renewed, remembered for the process's life (a killed predecessor's last
claim is its own install's; a clone's Leases stop at the snapshot while its claim goes on).
"""

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping

from spotpool.engine.leftovers.claims import (
    RENEW_EVERY,
    Claim,
    Watch,
    delete_claim,
    describe_rivals,
    read_claims,
    rivals,
    write_claim,
)
from spotpool.engine.state.backend_files import open_backend

log = logging.getLogger("spotpool_operator.claims")
# identity -> renewTime (epoch) of the install's Leases in this cluster, read now
LeaseHolders = Callable[[], Mapping[str, float]]


class IdentityClaims:
    def __init__(
        self,
        backend_url: str,
        cluster_id: str,
        install_id: str,
        nonce: str,
        kube_uid: str | None = None,
        lease: str | None = None,
        holders: LeaseHolders | None = None,
        lease_duration: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend_url, self.holders, self.clock = backend_url, holders, clock
        now = clock()
        self.mine = Claim(
            cluster=cluster_id, install=install_id, nonce=nonce, kube_uid=kube_uid, lease=lease,
            host=socket.gethostname(), started=now, renewed=now,
        )  # fmt: skip
        self.slack = 2 * lease_duration + 15.0
        self.watch = Watch()
        self.rivals: list[Claim] = []
        self.problem: str | None = "this process's claim of its identity is not written yet"
        self.on_change: list[Callable[[str | None], None]] = []  # the verdict moved
        self._lock = threading.Lock()

    def conflict(self) -> str | None:
        """Why nothing may be adopted, re-tagged or swept now, or None."""
        return self.problem

    def check(self) -> str | None:
        """Renew the claim, read the others: the verdict (blocking; a thread's)."""
        with self._lock:
            try:
                problem = self._check()
            except Exception as error:  # no proof either way: hold
                problem = f"the identity claims in the state backend cannot be read ({error})"
            before, self.problem = self.problem, problem
        if problem != before:
            if problem is None:
                log.info("identity claim %s of cluster %s: no rival", self.mine.nonce,
                         self.mine.cluster)  # fmt: skip
            else:
                log.error("%s", problem)
            for call in self.on_change:
                call(problem)
        return problem

    def _check(self) -> str | None:
        files = open_backend(self.backend_url)
        if files is None:  # Pulumi Cloud: its organisations keep clusters apart, not us
            return None
        self.mine = self.mine.model_copy(update={"renewed": self.clock()})
        write_claim(files, self.mine)
        claims = read_claims(files, self.mine.cluster)
        if self.holders is not None and self._foreign(claims):
            self.watch.saw_leases(self.holders())  # read after the claims: a new member's
        found = rivals(self.mine, claims, self.watch, self.clock(), self.slack,
                       leases=self.holders is not None)  # fmt: skip
        self.rivals = found
        return describe_rivals(self.mine, found) if found else None

    def _foreign(self, claims: list[Claim]) -> bool:
        """Any claim of this install no Lease seen yet vouches for: the Leases are read."""
        return any(
            c.nonce != self.mine.nonce
            and c.install == self.mine.install
            and self.watch.members.get(c.nonce, float("-inf")) < c.renewed - self.slack
            for c in claims
        )

    def release(self) -> None:
        """Stopping cleanly: this process's claim goes (blocking)."""
        files = open_backend(self.backend_url)
        if files is not None:
            delete_claim(files, self.mine)

    async def run(self, every: float = RENEW_EVERY) -> None:
        """Renew and check every `every` seconds until cancelled."""
        while True:
            await asyncio.sleep(every)
            await asyncio.to_thread(self.check)
