"""The storm fast path, operator side: a reclaimed slot's next instance is launched through
the cloud API at once (engine/launches/fast_launch.py), before the pool waits for an engine slot;
the Pulumi replacement that follows adopts it. In a storm the launches go at the account's
RunInstances rate (the shared token buckets), not at one Pulumi run per pool.

Launches run on a thread pool of their own: each may wait its turn at the account's bucket
for many seconds, and must not hold the default pool that carries Secret reads and status
writes. Each runs as one of the shard's operations (`guarded`: engine_calls' `_guarded`),
counted, so that a shard is given up only once its launches are over, and fenced: the
launch checks the shard's fence after every wait, right before each send (fast_launch.py).
A failed launch changes nothing: the Pulumi replacement makes that slot as before.
"""

import asyncio
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from spotpool.api.stackconfig import StackConfig
from spotpool.api.status import SpotpoolStatus
from spotpool_operator.basics.pools import PoolRef

# Launches waiting at once (their pace is the buckets'): enough for four accounts' RunInstances
# budgets (10 a second each) while a call takes up to ~3 s on a busy operator; 32 held a
# four-account storm to 12.6 launches a second (bench/storm.py --accounts 4).
LAUNCH_THREADS = 128
_launchers = ThreadPoolExecutor(max_workers=LAUNCH_THREADS, thread_name_prefix="fast-launch")


async def launch_ahead(
    engine: object,
    ref: PoolRef,
    placed: StackConfig,
    slots: Iterable[int],
    password: str | None,
    status: SpotpoolStatus,
    guarded: Callable[..., Any] | None = None,
) -> dict[int, str]:
    """Launch `slots`' next instances now, as placed; slot -> instance id launched. Slots
    with a surge instance are left out: their surge instance takes the slot. `guarded(call,
    *args)` runs the launch as one of the pool's shard's operations, behind its fence."""
    launcher = getattr(engine, "launch_replacements", None)
    surging = {surge.slot for surge in status.surges}
    wanted = sorted(s for s in slots if s not in surging)
    if launcher is None or not wanted:
        return {}
    loop = asyncio.get_running_loop()
    try:
        run = partial(guarded, launcher) if guarded is not None else launcher
        done = await loop.run_in_executor(_launchers, run, placed, wanted, password)
    except Exception as error:  # the Pulumi replacement still makes them
        ref.logger.warning(
            "fast launch of slot(s) %s failed (%s); the Pulumi run replaces them",
            wanted,
            type(error).__name__,
        )
        return {}
    if done.instances:
        launched = ", ".join(f"slot {s}: {i}" for s, i in sorted(done.instances.items()))
        ref.logger.info("launched ahead of the Pulumi run: %s", launched)
    if done.failed:
        ref.logger.info("not launched ahead (the Pulumi run replaces them): %s", done.failed)
    return dict(done.instances)
