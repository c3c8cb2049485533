"""This process's claim of its identity (engine/leftovers/claims.py), renewed every few
seconds in the state backend, and the verdict every sweep, adoption and re-tag waits on.

The claim is written before the operator serves anything and checked again right before each
sweep pass; a process that cannot write or read it holds too (no verdict, no proof). The same
claim is kept in each cloud account the sweep looks at (cloud_claims.py), for operators on
other backends: a live claim found there is judged as one in the backend. Who is a
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

from spotpool.engine.leftovers.claim_tags import field_of
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
from spotpool_operator.cloud.cloud_claims import CloudClaims

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
        self.cloud: CloudClaims | None = None  # runner.py, with the sweep's accounts
        self._lock = threading.Lock()

    def conflict(self) -> str | None:
        """Why nothing may be adopted, re-tagged or swept now, or None."""
        return self.problem

    def check(self, sweeping: bool = False) -> str | None:
        """Renew the claim, read the others: the verdict (blocking; a thread's). `sweeping`:
        a sweep pass follows, so every cloud account's claims are read now too."""
        with self._lock:
            try:
                problem = self._check(sweeping)
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

    def _check(self, sweeping: bool) -> str | None:
        files = open_backend(self.backend_url)
        if files is None:  # Pulumi Cloud: its organisations keep clusters apart, not us
            return None
        self.mine = self.mine.model_copy(update={"renewed": self.clock()})
        write_claim(files, self.mine)
        claims = read_claims(files, self.mine.cluster)
        if self.cloud is not None:
            claims += self._from_cloud(claims, self.cloud.sync(self.mine, sweeping))
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

    def _from_cloud(self, claims: list[Claim], found: list[Claim]) -> list[Claim]:
        """The cloud's claims of processes the backend shows no claim of (another backend's),
        each under its Lease identity when a field of the tag stands for one seen here."""
        seen = {field_of(c.nonce) for c in claims} | {field_of(self.mine.nonce)}
        members = {field_of(m): m for m in self.watch.members}
        return [
            c.model_copy(update={"nonce": members.get(c.nonce, c.nonce)})
            for c in found
            if c.nonce not in seen
        ]

    def release(self) -> None:
        """Stopping cleanly: this process's claim goes (blocking), from the cloud too."""
        if self.cloud is not None:
            self.cloud.release(self.mine)
        files = open_backend(self.backend_url)
        if files is not None:
            delete_claim(files, self.mine)

    async def run(self, every: float = RENEW_EVERY) -> None:
        """Renew and check every `every` seconds until cancelled."""
        while True:
            await asyncio.sleep(every)
            await asyncio.to_thread(self.check)
