"""A pool's daemon between two looks (process/handlers.py `rest`): it sleeps until its time,
its stop or news, and a wake whose news was already handled never makes it spin.

Before `rest`, a wake left set (by a notice whose surge had started, say) made every later
sleep return at once: one idle operator turned its pool's loop 200,000 times in 100 s."""

import asyncio
import time
from datetime import UTC, datetime
from typing import Any, cast

import kopf
import pytest
from spotpool_operator.basics.pools import PoolState
from spotpool_operator.process.handlers import rest

from spotpool.api.status import Checkpoint, Notices, SpotpoolStatus

pytestmark = pytest.mark.unit


class _Running:
    """kopf's DaemonStopped as a daemon that is never stopped sees it."""

    async def wait(self) -> bool:
        await asyncio.Event().wait()
        return True


def _never_stopped() -> kopf.DaemonStopped:
    return cast(kopf.DaemonStopped, cast(Any, _Running()))


def _turns(pool: PoolState, seconds: float, each: float) -> int:
    """How many times a daemon-like loop of `rest(each)` turns in `seconds`."""

    async def loop() -> int:
        stopped = _never_stopped()
        turns, ends = 0, time.monotonic() + seconds
        while time.monotonic() < ends:
            await rest(stopped, pool, each)
            turns += 1
        return turns

    return asyncio.run(loop())


def test_a_wake_with_its_news_handled_is_spent_not_spun_on() -> None:
    pool = PoolState(status=SpotpoolStatus())
    pool.wake.set()  # set by news since handled: nothing is urgent now
    assert _turns(pool, 0.5, 0.1) <= 6  # a turn a tenth of a second, not a busy loop
    assert not pool.wake.is_set()


def _rested(pool: PoolState, news_after: float | None = None) -> float:
    """Seconds one `rest(30 s)` of the pool lasted; with `news_after`, a reclaim is seen that
    many seconds into it (the fleet probe's gone slots and wake, pool_book._watch)."""

    async def one() -> float:
        def news() -> None:
            pool.gone_slots.add(1)
            pool.wake.set()

        if news_after is not None:
            asyncio.get_running_loop().call_later(news_after, news)
        started = time.monotonic()
        await rest(_never_stopped(), pool, 30.0)
        return time.monotonic() - started

    return asyncio.run(one())


def test_news_that_came_while_it_looked_means_no_sleep() -> None:
    pool = PoolState(status=SpotpoolStatus())
    pool.gone_slots.add(0)
    assert _rested(pool) < 1.0


def test_news_during_a_rest_wakes_it_at_once() -> None:
    assert _rested(PoolState(status=SpotpoolStatus()), news_after=0.2) < 5.0


def test_a_released_pool_rests_not_at_all() -> None:
    """Its shard went to another replica: the daemon looks again at once (and waits there)."""
    assert _rested(PoolState(status=SpotpoolStatus(), released=True)) < 1.0


def test_a_pool_rebuilt_from_its_status_knows_the_results_it_recorded() -> None:
    """The onNotice results a status holds are answered `recorded` by the replica that reads
    it (a takeover): PoolState learns them from the status it is built from."""
    recorded = Checkpoint(slot=0, instance_id="ins-done", exit_code=0, seconds=1.5,
                          time=datetime.now(UTC))  # fmt: skip
    status = SpotpoolStatus(notices=Notices(checkpoints=[recorded]))
    pool = PoolState(status=status)
    assert pool.written_checkpoints == {"ins-done"}
    assert not pool.has_news  # recorded results are no work for its daemon
