"""Engine slots: how many Pulumi operations run at once in this replica, in which order.

At most `total` operations at once, and at most `per_account` of them on one cloud account
(one SecretId): the account's share of a cluster-wide bound, so that N replicas do not run N
times one account's RunInstances. A free slot goes to the most urgent waiter whose account
has room — reclaim replacements before spec updates, before periodic full refreshes, before
first creations — and, within a priority, to the namespace with the fewest operations running
and then the one served longest ago (one namespace applying fifty pools at once does not make
another's one pool wait behind all of them), first come first served within a namespace.

A share below one operation (more replicas than the account's bound) is kept on average: one
operation at a time, and after an operation that took t seconds the account rests
t x (1/share - 1), so the replicas' shares never add up to more than the bound.
"""

import asyncio
import contextlib
import itertools
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from enum import IntEnum


class Priority(IntEnum):
    REPLACE = 0  # the cloud took instances away: capacity is short now
    UPDATE = 1  # a person changed the spec (or a pool is being deleted)
    REFRESH = 2  # the periodic full refresh: drift nobody reported
    CREATE = 3  # a pool's first up


@dataclass
class _Waiter:
    priority: int
    seq: int
    account: str
    granted: asyncio.Future[None] = field(repr=False)
    namespace: str = ""


class EngineSlots:
    def __init__(
        self,
        total: int,
        per_account: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.per_account = per_account
        self.running = 0
        self._by_account: dict[str, int] = {}
        self._resting: dict[str, float] = {}  # account -> until when (a share below one)
        self._clock = clock
        self._wakeup: asyncio.TimerHandle | None = None
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()
        self._in_namespace: dict[str, int] = {}  # namespace -> operations running
        self._last_grant: dict[str, int] = {}  # namespace -> the number of its latest grant
        self._grants = itertools.count(1)

    def resize(self, total: int | None = None, per_account: float | None = None) -> None:
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
    async def take(
        self, priority: Priority, account: str = "", namespace: str = ""
    ) -> AsyncIterator[None]:
        waiter = _Waiter(
            priority, next(self._seq), account, asyncio.get_running_loop().create_future(),
            namespace,
        )  # fmt: skip
        self._waiting.append(waiter)
        self._dispatch()
        try:
            await waiter.granted
        except asyncio.CancelledError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                self._release(waiter)  # granted as it was cancelled: give it back
            else:
                self._waiting.remove(waiter)
            raise
        started = self._clock()
        try:
            yield
        finally:
            self._rest(account, self._clock() - started)
            self._release(waiter)

    def _room(self, account: str) -> bool:
        share = self.per_account
        if share is None:
            return True
        if self._by_account.get(account, 0) >= max(1, math.floor(share)):
            return False
        return share >= 1 or self._resting.get(account, 0.0) <= self._clock()

    def _rest(self, account: str, held: float) -> None:
        """A share below one: the account rests so that its average stays within the share."""
        share = self.per_account
        if share is not None and 0 < share < 1:
            self._resting[account] = self._clock() + held * (1 / share - 1)

    def _wake_for_rests(self) -> None:
        """Dispatch again when the earliest rest of a waiting account ends."""
        now = self._clock()
        ends = [
            self._resting[w.account]
            for w in self._waiting
            if not w.granted.done() and self._resting.get(w.account, 0.0) > now
        ]
        if not ends or self._wakeup is not None:
            return

        def wake() -> None:
            self._wakeup = None
            self._dispatch()

        self._wakeup = asyncio.get_running_loop().call_later(min(ends) - now, wake)

    def _order(self, waiter: _Waiter) -> tuple[int, int, int, int]:
        """Most urgent first; within a priority the namespace with the fewest running, then
        the one granted longest ago; then first come."""
        namespace = waiter.namespace
        return (waiter.priority, self._in_namespace.get(namespace, 0),
                self._last_grant.get(namespace, 0), waiter.seq)  # fmt: skip

    def _dispatch(self) -> None:
        """Grant free slots in `_order`, skipping waiters whose account is full."""
        self._waiting = [w for w in self._waiting if not w.granted.done()]
        while self.running < self.total:
            ready = [w for w in self._waiting if self._room(w.account)]
            if not ready:
                break
            waiter = min(ready, key=self._order)
            self._waiting.remove(waiter)
            self.running += 1
            self._by_account[waiter.account] = self._by_account.get(waiter.account, 0) + 1
            namespace = waiter.namespace
            self._in_namespace[namespace] = self._in_namespace.get(namespace, 0) + 1
            self._last_grant[namespace] = next(self._grants)
            waiter.granted.set_result(None)
        if self._waiting and self._resting:
            self._wake_for_rests()

    def _release(self, waiter: _Waiter) -> None:
        self.running -= 1
        for counts, key in ((self._by_account, waiter.account),
                            (self._in_namespace, waiter.namespace)):  # fmt: skip
            left = counts.get(key, 1) - 1
            if left:
                counts[key] = left
            else:
                counts.pop(key, None)
        self._dispatch()
