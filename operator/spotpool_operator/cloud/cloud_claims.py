"""This process's identity claim in each cloud account it sweeps (engine/leftovers/claim_tags.py):
where an operator on another state backend with the same cluster id and install sees it.

Renewed every 30 s per account (a CreateTag and a DeleteTag: the tag API allows 20 a second)
and read (one DescribeTagValues) right before every sweep pass as well; the live claims found
there join the backend's in cloud/claims.py, so a rival found in the cloud holds everything a
rival in the backend holds. An account whose claims could not be written or read is not swept
(`unproven`): nothing proves no other cluster uses this identity there. A stale value (not
renewed for 90 s) is deleted by whoever reads it; a process stopping cleanly deletes its own.
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from spotpool.engine.leftovers.claim_tags import (
    RENEW_EVERY,
    claim_key,
    encode,
    sort_values,
)
from spotpool.engine.leftovers.claims import Claim
from spotpool.engine.tencent.credentials import Credentials

log = logging.getLogger("spotpool_operator.claims")
# The (key pair, region) pairs the sweep looks at now (strays.py's accounts).
Accounts = Callable[[], list[tuple[Credentials, str]]]


class Pairs(Protocol):
    """engine/tencent/tag_pairs.py's TagPairs (a fake in unit tests)."""

    def create(self, credentials: Credentials, region: str, key: str, value: str) -> None: ...
    def delete(self, credentials: Credentials, region: str, key: str, value: str) -> None: ...
    def values(self, credentials: Credentials, region: str, key: str) -> list[str]: ...


@dataclass
class _Account:
    credentials: Credentials
    region: str
    written: str | None = None  # this process's value there now
    written_at: float = float("-inf")
    read_at: float | None = None  # the last read that succeeded
    others: list[Claim] = field(default_factory=list)  # live claims of other processes
    error: str | None = None  # why the last write or read failed


class CloudClaims:
    def __init__(
        self, accounts: Accounts, pairs: Pairs, clock: Callable[[], float] = time.time
    ) -> None:
        self.accounts, self.pairs, self.clock = accounts, pairs, clock
        self.known: dict[str, _Account] = {}  # by key pair: tags are the account's, not a region's

    def sync(self, mine: Claim, sweeping: bool = False) -> list[Claim]:
        """Renew this process's claim where it is due and read the others' (every account when
        `sweeping`: a pass follows); the live claims of other processes in every account. One
        account failing is its own (`unproven`), never an exception here."""
        for credentials, region in self.accounts():
            key = credentials.identity_key()
            account = self.known.setdefault(key, _Account(credentials, region))
            account.credentials = credentials
            due = self.clock() - account.written_at >= RENEW_EVERY
            if not (due or sweeping):
                continue
            try:
                self._sync(account, mine, due)
            except Exception as error:
                why = f"{type(error).__name__} {getattr(error, 'code', '') or ''}".strip()
                if why != account.error:
                    log.warning("identity claim in the cloud account of %s (%s) not written "
                                "or read: %s; that account is not swept until it is",
                                key, account.region, why)  # fmt: skip
                account.error = why
        return [claim for account in self.known.values() for claim in account.others]

    def _sync(self, account: _Account, mine: Claim, renew: bool) -> None:
        key, now = claim_key(mine.cluster), self.clock()
        if renew:
            value = encode(mine.model_copy(update={"renewed": now}))
            self.pairs.create(account.credentials, account.region, key, value)
            account.written, account.written_at = value, now
        values = self.pairs.values(account.credentials, account.region, key)
        read = sort_values(mine.cluster, values, mine.nonce, account.written, self.clock())
        if account.written is not None and account.written not in values:
            account.written_at = float("-inf")  # written again at the next check
            raise LookupError("this process's claim is not listed")  # a lagging or lost write
        for value in [*read.own, *read.stale]:  # ours replaced, and nobody's any more
            self.pairs.delete(account.credentials, account.region, key, value)
        account.others, account.read_at, account.error = read.others, now, None

    def unproven(self, credentials: Credentials, region: str) -> str | None:
        """Why this account may not be swept now (None: its claims were read a moment ago)."""
        account = self.known.get(credentials.identity_key())
        if account is None or (account.read_at is None and account.error is None):
            return "its identity claims not read yet"
        if account.error is not None or account.read_at is None:
            return f"its identity claims could not be read ({account.error})"
        if self.clock() - account.read_at > 2 * RENEW_EVERY:
            return "its identity claims not read for a minute"
        return None

    def release(self, mine: Claim) -> None:
        """Stopping cleanly: this process's value goes from every account (best effort: a
        value left is stale in 90 s)."""
        for account in self.known.values():
            if account.written is None:
                continue
            try:
                self.pairs.delete(account.credentials, account.region, claim_key(mine.cluster),
                                  account.written)  # fmt: skip
            except Exception as error:
                log.info("identity claim in the cloud not deleted: %s", type(error).__name__)
