"""Benchmark: placement by price alone against placement by learned interruption rates.

One emulator where zone A is 40 % cheaper than zone B and reclaims spot instances 10x as often;
`--pools` pools of 2 over both zones on `spotpool operator run`, for `--minutes` after they first
converge; one run with `placementStrategy: lowestPrice`, one with `lowestInterruptionCost`, each
in a fresh world (new cluster, emulator, backend, learner ConfigMap), for each of `--seeds`.

Both strategies face the same reclaims: the bench, not the emulator's generator, draws them,
replayed per offering. Each second of the measured window and each offering (zone x type), the
instance running there for pool P's slot S is reclaimed when the draw keyed by (seed, offering,
second, P, S) falls under the offering's rate: the same draws whichever strategy put what where,
so a strategy that keeps slots out of zone A escapes exactly the reclaims that hit zone A's
slots in the other run. Both runs get the same `--concurrency` (the operator's
`--max-concurrent`; by default one run per pool, so no replacement queues behind another).

Time runs `--speedup` times faster than on the real cloud, and every duration of the model is
scaled with it: reclaim rates (by default A 2/h and B 0.2/h of real time become 24/h and 2.4/h),
the pools' `interruptionCostHours` (1 h real -> 5 min) and the operator's
`--interruption-half-life`. Figures are in bench time. The operator's `--avoid-for` is 0 by
default in both runs, so that only the strategies differ (`--avoid-for 15` is the default 3 min
scaled: the fleet-wide avoidance after each reclaim then keeps most of both runs out of A).

Measured from the emulator's own view every second, after every pool first converged:
- reclaims: instances reclaimed in the window, per zone;
- capacity gap: instance-seconds the pools had fewer than 2 RUNNING instances;
- spend: price x hours of every live instance, plus, per reclaim, `interruptionCostHours` of
  its zone's price (the work a reclaim throws away), the spend the strategy is judged on.
One row per strategy and seed, then per strategy the mean and the spread (min-max) over the
seeds, and the learned/price-only ratios' spread.

    .venv/bin/python bench/placement.py [--pools 20] [--minutes 10] [--seeds 7,8,9]
        [--runs lowestPrice,lowestInterruptionCost] [--avoid-for 0] [--speedup 12]
        [--concurrency N]
"""

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spotpool.api.stackconfig import TAG_POOL_UID, TAG_SLOT  # noqa: E402
from spotpool.localworld.operator import OperatorWorld, local_world, pool_manifest  # noqa: E402

REGION, ZONE_A, ZONE_B = "ap-singapore", "ap-singapore-2", "ap-singapore-3"
TYPE, IMAGE = "GN7.2XLARGE32", "img-eb30mz89"
PRICE_B = 1.00
PRICE_A = 0.60  # 40 % cheaper
GONE = {"TERMINATING", "SHUTDOWN", "LAUNCH_FAILED"}


@dataclass
class Tally:
    strategy: str
    seed: int = 0
    reclaims: dict[str, int] = field(default_factory=dict)
    gap_seconds: float = 0.0
    run_cost: float = 0.0
    lost_cost: float = 0.0
    hours: dict[str, float] = field(default_factory=dict)

    @property
    def total_reclaims(self) -> int:
        return sum(self.reclaims.values())

    @property
    def spend(self) -> float:
        return self.run_cost + self.lost_cost


def _price(zone: str) -> float:
    return PRICE_A if zone == ZONE_A else PRICE_B


@dataclass(frozen=True)
class Schedule:
    """The reclaims both strategies face: `rates` per offering (zone, type), per second."""

    seed: int
    rates: dict[tuple[str, str], float]

    def draw(self, offering: tuple[str, str], second: int, pool: str, slot: str) -> float:
        """A uniform draw in [0, 1) for this offering, second of the window and slot."""
        key = f"{self.seed}/{offering[0]}/{offering[1]}/{second}/{pool}/{slot}".encode()
        return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2**64

    def doomed(self, second: int, running: list[dict[str, str]]) -> list[str]:
        """The instances (`id`, `zone`, `type`, `pool`, `slot`) reclaimed at `second`."""
        return [
            item["id"]
            for item in running
            if self.draw((item["zone"], item["type"]), second, item["pool"], item["slot"])
            < self.rates.get((item["zone"], item["type"]), 0.0)
        ]


def _tags(item: dict[str, object]) -> dict[str, str]:
    return {str(t["Key"]): str(t["Value"]) for t in item.get("Tags") or []}  # type: ignore[attr-defined]


def measure(
    world: OperatorWorld,
    pools: dict[str, str],
    seconds: float,
    lost_hours: float,
    t: Tally,
    schedule: Schedule,
) -> None:
    """Sample the emulator each second for `seconds` (`pools`: uid -> name): reclaim what the
    schedule dooms for every second gone by (none skipped on a slow sample), then count the
    gap, run hours and reclaims in the window."""
    seen_reclaimed = {
        i["InstanceId"]
        for i in world.emulator.all_instances()
        if i.get("GoneReason") == "reclaimed" or i.get("SpotTerminationTime")
    }
    start = last = time.monotonic()
    drawn = 0  # the seconds of the window whose draws were made
    while (now := time.monotonic()) < start + seconds:
        span, last = now - last, now
        instances = world.emulator.all_instances()
        running = [
            {"id": i["InstanceId"], "zone": i["Zone"], "type": i["InstanceType"],
             "pool": pools[_tags(i).get(TAG_POOL_UID, "")], "slot": _tags(i).get(TAG_SLOT, "")}
            for i in instances
            if _tags(i).get(TAG_POOL_UID) in pools and i["InstanceState"] == "RUNNING"
            and not i.get("Gone") and not i.get("SpotTerminationTime")
        ]  # fmt: skip
        doomed: list[str] = []
        while drawn <= int(now - start):
            doomed += schedule.doomed(drawn, running)
            drawn += 1
        for victim in sorted(set(doomed)):  # one at a time: one gone meanwhile spoils no other
            world.emulator.admin("POST", "/_emulator/reclaim", {"InstanceIds": [victim]})
        if doomed:
            instances = world.emulator.all_instances()
        alive: dict[str, int] = {uid: 0 for uid in pools}
        for item in instances:
            uid = _tags(item).get(TAG_POOL_UID)
            if uid not in pools:
                continue
            zone = item["Zone"]
            reclaimed = item.get("GoneReason") == "reclaimed" or item.get("SpotTerminationTime")
            if reclaimed and item["InstanceId"] not in seen_reclaimed:
                seen_reclaimed.add(item["InstanceId"])
                t.reclaims[zone] = t.reclaims.get(zone, 0) + 1
                t.lost_cost += lost_hours * _price(zone)
            if item.get("Gone") or item["InstanceState"] in GONE:
                continue
            t.run_cost += _price(zone) * span / 3600
            t.hours[zone] = t.hours.get(zone, 0.0) + span / 3600
            if item["InstanceState"] == "RUNNING" and not reclaimed:
                alive[uid] += 1
        t.gap_seconds += sum(max(0, 2 - n) for n in alive.values()) * span
        time.sleep(max(0.0, 1.0 - (time.monotonic() - now)))


def one_run(strategy: str, seed: int, args: argparse.Namespace, work: Path) -> Tally:
    k = args.speedup
    per_second = args.rate_a * k / 3600
    schedule = Schedule(seed, {(ZONE_A, TYPE): per_second, (ZONE_B, TYPE): per_second / 10})
    prices = work / "prices.json"
    prices.write_text(
        json.dumps(
            [
                {"Zone": ZONE_A, "InstanceType": TYPE, "Price": PRICE_A},
                {"Zone": ZONE_B, "InstanceType": TYPE, "Price": PRICE_B},
            ]
        )
    )
    emulator_args = ["--spot-prices", str(prices)]  # no random reclaims: the schedule's only
    env = {
        "SPOTPOOL_AVOID_FOR": f"{args.avoid_for:g}",
        "SPOTPOOL_INTERRUPTION_HALF_LIFE": f"{6 * 3600 / k:g}",
        "SPOTPOOL_MAX_CONCURRENT": str(args.concurrency or args.pools),
    }
    lost_hours = args.cost_hours / k
    tally = Tally(strategy, seed)
    with local_world(work, boot_seconds=1.0, emulator_args=emulator_args, env=env) as world:
        world.start()
        namespace = world.namespace()
        names = [f"pool-{n:02d}" for n in range(args.pools)]
        for name in names:
            world.apply(namespace, pool_manifest(
                name, replicas=2, minimum=2, maximum=2, availabilityZone=None,
                availabilityZones=[ZONE_A, ZONE_B], placementStrategy=strategy,
                interruptionCostHours=round(lost_hours, 4), refreshInterval="30s",
            ))  # fmt: skip
        started = time.monotonic()
        pools: dict[str, str] = {}
        for name in names:
            pool = world.wait_ready(namespace, name, 2, timeout=900)
            pools[pool["metadata"]["uid"]] = name
        print(f"  {strategy}, seed {seed}: {args.pools} pools converged in "
              f"{time.monotonic() - started:.0f} s; measuring {args.minutes} min",
              flush=True)  # fmt: skip
        measure(world, pools, args.minutes * 60, lost_hours, tally, schedule)
    return tally


def _spread(values: list[float], form: str = "{:.0f}") -> str:
    """`mean (min-max)` of the values."""
    if not values:
        return "-"
    mean = form.format(statistics.fmean(values))
    return f"{mean} ({form.format(min(values))}-{form.format(max(values))})"


def _ratios(base: list[Tally], other: list[Tally], of: Callable[[Tally], float]) -> list[float]:
    return [of(o) / of(b) for b, o in zip(base, other, strict=True) if of(b)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", type=int, default=20)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seeds", default="7,8,9", help="one pair of runs a seed")
    parser.add_argument("--speedup", type=float, default=12.0, help="bench time / real time")
    parser.add_argument("--rate-a", type=float, default=2.0, help="zone A reclaims/h, real time")
    parser.add_argument("--cost-hours", type=float, default=1.0, help="per reclaim, real time")
    parser.add_argument("--avoid-for", type=float, default=0.0,
                        help="operator --avoid-for, bench seconds (both runs)")  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=0,
                        help="operator --max-concurrent, both runs (0: one per pool)")  # fmt: skip
    parser.add_argument("--runs", default="lowestPrice,lowestInterruptionCost")
    args = parser.parse_args()
    strategies = args.runs.split(",")
    results: dict[str, list[Tally]] = {s: [] for s in strategies}
    for seed in (int(s) for s in args.seeds.split(",")):
        for strategy in strategies:
            with tempfile.TemporaryDirectory(prefix="spotpool-placement-") as tmp:
                t = one_run(strategy, seed, args, Path(tmp))
            results[strategy].append(t)
            print(f"  {strategy}, seed {seed}: {t.total_reclaims} reclaims "
                  f"({t.reclaims.get(ZONE_A, 0)} in A), gap {t.gap_seconds:.0f} instance-s, "
                  f"spend {t.spend:.2f}", flush=True)  # fmt: skip
    print()
    print("| strategy | seed | reclaims (A / B) | capacity gap (instance-s) "
          "| instance-hours A / B | spend (run + lost) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for tallies in results.values():
        for t in tallies:
            print(
                f"| {t.strategy} | {t.seed} | {t.total_reclaims} ({t.reclaims.get(ZONE_A, 0)} / "
                f"{t.reclaims.get(ZONE_B, 0)}) | {t.gap_seconds:.0f} | "
                f"{t.hours.get(ZONE_A, 0):.2f} / {t.hours.get(ZONE_B, 0):.2f} | "
                f"{t.spend:.2f} ({t.run_cost:.2f} + {t.lost_cost:.2f}) |"
            )
    print()
    print("| strategy | reclaims, mean (min-max) | capacity gap | spend |")
    print("|---|---|---|---|")
    for strategy, tallies in results.items():
        print(
            f"| {strategy} | {_spread([t.total_reclaims for t in tallies])} | "
            f"{_spread([t.gap_seconds for t in tallies])} | "
            f"{_spread([t.spend for t in tallies], '{:.2f}')} |"
        )
    if len(strategies) == 2:
        base, learned = (results[s] for s in strategies)
        print(
            f"\n{strategies[1]}/{strategies[0]} over {len(base)} seeds, mean (min-max): "
            f"reclaims x{_spread(_ratios(base, learned, lambda t: t.total_reclaims), '{:.2f}')}, "
            f"gap x{_spread(_ratios(base, learned, lambda t: t.gap_seconds), '{:.2f}')}, "
            f"spend x{_spread(_ratios(base, learned, lambda t: t.spend), '{:.2f}')}"
        )


if __name__ == "__main__":
    main()
