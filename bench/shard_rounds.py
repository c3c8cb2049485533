"""Benchmark: how long a replica's shard work takes against a slow API server — the timings
tests/operator/test_shard_fencing.py used to assert, measured here instead (the tests assert
what runs at once and in what order).

Three figures, each the median (and worst) of `--rounds` tries, on the in-memory Lease server
of the tests (tests/operator/lease_fakes.py) with a hand-moved Lease clock:

- `round`: one renewal round of a replica holding every shard (the renewals, its membership
  and the listing) when each request takes `--request-seconds` (serially: shards + 2 times it);
- `kills`: from the moment every shard's Lease slipped away (renewals failing) until the last
  shard's stop callback ran, each callback taking `--kill-seconds` (serially: shards times it);
- `release`: `release_all(grace)` at shutdown with one operation that never ends (it returns
  after the grace).

    .venv/bin/python bench/shard_rounds.py [--shards 16] [--rounds 5] [--request-seconds 0.4]
        [--kill-seconds 0.5] [--grace 1.0]
"""

import argparse
import contextlib
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

from spotpool_operator.replicas.sharding import shard_of
from spotpool_operator.replicas.shards import ShardLeases

from tests.operator.lease_fakes import FakeClock, FakeLeases, Stalling

DURATION = 30.0


def _replica(api: object, clock: FakeClock, shards: int) -> ShardLeases:
    replica = ShardLeases(api, "ops", "op", shards, DURATION, hostname="pod-a", monotonic=clock)
    replica.step()
    replica.step()  # the second round takes what the first one's listing showed free
    assert all(replica.holds(s) for s in range(shards)), "the replica holds every shard"
    return replica


def round_seconds(shards: int, request_seconds: float) -> float:
    server, clock = FakeLeases(), FakeClock()
    replica = _replica(server, clock, shards)
    server.delay = request_seconds
    started = time.monotonic()
    replica.step()
    return time.monotonic() - started


def kill_seconds(shards: int, kill_seconds: float) -> float:
    server, clock = FakeLeases(), FakeClock()
    api = Stalling(server)
    replica = _replica(api, clock, shards)
    stopped: list[float] = []
    all_stopped = threading.Event()

    def kill(shard: int, uids: list[str]) -> None:
        time.sleep(kill_seconds)
        stopped.append(time.monotonic())
        if len(stopped) == shards:
            all_stopped.set()

    replica.on_stop.append(kill)
    done = threading.Event()
    watcher = threading.Thread(target=replica._watch, args=(done,))
    watcher.start()
    try:
        api.down = True
        with contextlib.suppress(TimeoutError):  # the renewals fail, as they should
            replica.step()
        clock.advance(DURATION * 2 / 3 + 0.1)
        lost = time.monotonic()
        if not all_stopped.wait(shards * kill_seconds + 30):
            raise SystemExit(f"only {len(stopped)} of {shards} shards stopped")
    finally:
        done.set()
        watcher.join()
    return max(stopped) - lost


def release_seconds(grace: float) -> float:
    server, clock = FakeLeases(), FakeClock()
    replica = _replica(server, clock, 2)
    uid = next(f"uid-{n}" for n in range(1000) if shard_of(f"uid-{n}", 2) == 0)
    holding, finish = threading.Event(), threading.Event()

    def operation() -> None:
        with replica.operation(uid):
            holding.set()
            finish.wait()

    thread = threading.Thread(target=operation)
    thread.start()
    holding.wait()
    started = time.monotonic()
    replica.release_all(grace=grace)
    took = time.monotonic() - started
    finish.set()
    thread.join()
    return took


def _line(name: str, samples: list[float], serial: float | None) -> str:
    text = f"{name:8} median {statistics.median(samples):6.2f} s  worst {max(samples):6.2f} s"
    return text + (f"  (one after another: {serial:.1f} s)" if serial else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--request-seconds", type=float, default=0.4)
    parser.add_argument("--kill-seconds", type=float, default=0.5)
    parser.add_argument("--grace", type=float, default=1.0)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    rounds = [round_seconds(args.shards, args.request_seconds) for _ in range(args.rounds)]
    kills = [kill_seconds(args.shards, args.kill_seconds) for _ in range(args.rounds)]
    releases = [release_seconds(args.grace) for _ in range(args.rounds)]
    print(_line("round", rounds, (args.shards + 2) * args.request_seconds))
    print(_line("kills", kills, args.shards * args.kill_seconds))
    print(_line("release", releases, None) + f"  (grace {args.grace:.1f} s)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
