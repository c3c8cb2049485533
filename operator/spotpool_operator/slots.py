"""Engine slots: how many Pulumi operations run at once in this replica, in which order.

At most `total` operations at once, and at most `per_account` of them on one cloud account
(one SecretId): the account's share of a cluster-wide bound, so that N replicas do not run N
times one account's RunInstances. A free slot goes to the most urgent waiter whose account
has room — reclaim replacements before spec updates, before periodic full refreshes, before
first creations — and first come first served within a priority.
"""

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import IntEnum


class Priority(IntEnum):
    REPLACE = 0  # the cloud took instances away: capacity is short now
    UPDATE = 1  # a person changed the spec (or a pool is being deleted)
    REFRESH = 2  # the periodic full refresh: drift nobody reported
    CREATE = 3  # a pool's first up


@dataclass(order=True)
class _Waiter:
    priority: int
    seq: int
    account: str = field(compare=False)
    granted: asyncio.Future[None] = field(compare=False)


class EngineSlots:
    def __init__(self, total: int, per_account: int | None = None) -> None:
        self.total = total
        self.per_account = per_account
        self.running = 0
        self._by_account: dict[str, int] = {}
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()

    def resize(self, total: int | None = None, per_account: int | None = None) -> None:
        """New bounds (the replica count changed); running operations finish as they are."""
        if total is not None:
            self.total = total
        self.per_account = per_account
        self._dispatch()

    def queued(self, priority: Priority | None = None) -> int:
        return sum(
            1
            for w in self._waiting
            if not w.granted.done() and (priority is None or w.priority == priority)
        )

    @contextlib.asynccontextmanager
    async def take(self, priority: Priority, account: str = "") -> AsyncIterator[None]:
        waiter = _Waiter(
            priority, next(self._seq), account, asyncio.get_running_loop().create_future()
        )
        heapq.heappush(self._waiting, waiter)
        self._dispatch()
        try:
            await waiter.granted
        except asyncio.CancelledError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                self._release(account)  # granted as it was cancelled: give it back
            else:
                self._waiting.remove(waiter)
                heapq.heapify(self._waiting)
            raise
        try:
            yield
        finally:
            self._release(account)

    def _room(self, account: str) -> bool:
        return self.per_account is None or self._by_account.get(account, 0) < self.per_account

    def _dispatch(self) -> None:
        """Grant free slots, most urgent first, skipping waiters whose account is full."""
        skipped: list[_Waiter] = []
        while self._waiting and self.running < self.total:
            waiter = heapq.heappop(self._waiting)
            if waiter.granted.done():
                continue
            if not self._room(waiter.account):
                skipped.append(waiter)
                continue
            self.running += 1
            self._by_account[waiter.account] = self._by_account.get(waiter.account, 0) + 1
            waiter.granted.set_result(None)
        for waiter in skipped:
            heapq.heappush(self._waiting, waiter)

    def _release(self, account: str) -> None:
        self.running -= 1
        left = self._by_account.get(account, 1) - 1
        if left:
            self._by_account[account] = left
        else:
            self._by_account.pop(account, None)
        self._dispatch()
