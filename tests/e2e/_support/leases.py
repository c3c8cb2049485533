"""Replicas' Lease loops run for real (`ShardLeases.run`: the rounds and the watcher thread)
in threads of the test process, against the API server directly or through a stallable
proxy (the `lease_world` fixture)."""

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import kubernetes
from spotpool_operator.replicas.shards import ShardLeases


@dataclass
class Running:
    """A replica's real loops (`ShardLeases.run`: rounds and the watcher thread) in a thread."""

    replica: ShardLeases
    stops: dict[int, list[float]] = field(default_factory=dict)  # shard -> when its work stopped
    loop: asyncio.AbstractEventLoop | None = None
    task: "asyncio.Task[None] | None" = None

    def __post_init__(self) -> None:
        def stopped(shard: int, uids: list[str]) -> None:
            times = self.stops.setdefault(shard, [])
            if not times or time.monotonic() - times[-1] > 1.0:  # the first kill of a stop
                times.append(time.monotonic())

        self.replica.on_stop.append(stopped)
        started = threading.Event()

        def serve() -> None:
            async def main() -> None:
                self.loop = asyncio.get_running_loop()
                self.task = asyncio.current_task()
                started.set()
                with contextlib.suppress(asyncio.CancelledError):
                    await self.replica.run()

            asyncio.run(main())

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        started.wait(5)

    def held(self) -> set[int]:
        return {s for s in range(self.replica.count) if self.replica.holds(s)}

    def stop(self) -> None:
        if self.loop is not None and self.task is not None:
            self.loop.call_soon_threadsafe(self.task.cancel)
        self.thread.join(10)
        self.replica.release_all(grace=5)


def coordination_api(kubeconfig: Path) -> object:
    """A CoordinationV1Api (Leases) talking to the API server through `kubeconfig`."""
    client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    return kubernetes.client.CoordinationV1Api(client)
