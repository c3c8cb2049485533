"""Benchmark: placement by price alone against placement by learned interruption rates.

One emulator where zone A is 40 % cheaper than zone B and reclaims spot instances 10x as often;
`--pools` pools of 2 over both zones on `spotpool operator run`, for `--minutes` after they first
converge; one run with `placementStrategy: lowestPrice`, one with `lowestInterruptionCost`, each
in a fresh world (new cluster, emulator, backend, learner ConfigMap) with the same reclaim seed.

Time runs `--speedup` times faster than on the real cloud, and every duration of the model is
scaled with it: reclaim rates (by default A 2/h and B 0.2/h of real time become 24/h and 2.4/h),
the pools' `interruptionCostHours` (1 h real -> 5 min) and the operator's
`--interruption-half-life`. Figures are in bench time. The operator's `--avoid-for` is 0 by
default in both runs, so that only the strategies differ (`--avoid-for 15` is the default 3 min
scaled: the fleet-wide avoidance after each reclaim then keeps most of both runs out of A).

Measured from the emulator's own view every second, after every pool first converged:
- reclaims: instances the emulator reclaimed in the window, per zone;
- capacity gap: instance-seconds the pools had fewer than 2 RUNNING instances;
- spend: price x hours of every live instance, plus, per reclaim, `interruptionCostHours` of
  its zone's price (the work a reclaim throws away), the spend the strategy is judged on.

    .venv/bin/python bench/placement.py [--pools 20] [--minutes 10] [--seed 7]
        [--runs lowestPrice,lowestInterruptionCost] [--avoid-for 0] [--speedup 12]
"""

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spotpool.localworld.operator import OperatorWorld, local_world, pool_manifest  # noqa: E402

REGION, ZONE_A, ZONE_B = "ap-singapore", "ap-singapore-2", "ap-singapore-3"
TYPE, IMAGE = "GN7.2XLARGE32", "img-eb30mz89"
PRICE_B = 1.00
PRICE_A = 0.60  # 40 % cheaper
GONE = {"TERMINATING", "SHUTDOWN", "LAUNCH_FAILED"}


@dataclass
class Tally:
    strategy: str
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


def measure(
    world: OperatorWorld, uids: set[str], seconds: float, lost_hours: float, t: Tally
) -> None:
    """Sample the emulator each second for `seconds`: gap, run hours, reclaims in the window."""
    seen_reclaimed = {
        i["InstanceId"]
        for i in world.emulator.all_instances()
        if i.get("GoneReason") == "reclaimed" or i.get("SpotTerminationTime")
    }
    end = time.monotonic() + seconds
    last = time.monotonic()
    while (now := time.monotonic()) < end:
        span, last = now - last, now
        running: dict[str, int] = {uid: 0 for uid in uids}
        for item in world.emulator.all_instances():
            tags = {tag["Key"]: tag["Value"] for tag in item.get("Tags") or []}
            uid = tags.get("spotpool-pool-uid")
            if uid not in uids:
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
                running[uid] += 1
        t.gap_seconds += sum(max(0, 2 - n) for n in running.values()) * span
        time.sleep(max(0.0, 1.0 - (time.monotonic() - now)))


def one_run(strategy: str, args: argparse.Namespace, work: Path) -> Tally:
    k = args.speedup
    rates = [
        f"{ZONE_A}/{TYPE}={args.rate_a * k:g}/h",
        f"{ZONE_B}/{TYPE}={args.rate_a * k / 10:g}/h",
    ]
    prices = work / "prices.json"
    prices.write_text(
        json.dumps(
            [
                {"Zone": ZONE_A, "InstanceType": TYPE, "Price": PRICE_A},
                {"Zone": ZONE_B, "InstanceType": TYPE, "Price": PRICE_B},
            ]
        )
    )
    emulator_args = ["--spot-prices", str(prices), "--seed", str(args.seed)]
    for rate in rates:
        emulator_args += ["--reclaim-rates", rate]
    avoid = args.avoid_for
    env = {
        "SPOTPOOL_AVOID_FOR": f"{avoid:g}",
        "SPOTPOOL_INTERRUPTION_HALF_LIFE": f"{6 * 3600 / k:g}",
        "SPOTPOOL_MAX_CONCURRENT": "4",
    }
    lost_hours = args.cost_hours / k
    tally = Tally(strategy)
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
        uids = set()
        for name in names:
            pool = world.wait_ready(namespace, name, 2, timeout=900)
            uids.add(pool["metadata"]["uid"])
        print(f"  {strategy}: {args.pools} pools converged in {time.monotonic() - started:.0f} s;"
              f" measuring {args.minutes} min", flush=True)  # fmt: skip
        measure(world, uids, args.minutes * 60, lost_hours, tally)
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", type=int, default=20)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--speedup", type=float, default=12.0, help="bench time / real time")
    parser.add_argument("--rate-a", type=float, default=2.0, help="zone A reclaims/h, real time")
    parser.add_argument("--cost-hours", type=float, default=1.0, help="per reclaim, real time")
    parser.add_argument("--avoid-for", type=float, default=0.0,
                        help="operator --avoid-for, bench seconds (both runs)")  # fmt: skip
    parser.add_argument("--runs", default="lowestPrice,lowestInterruptionCost")
    args = parser.parse_args()
    results = []
    for strategy in args.runs.split(","):
        with tempfile.TemporaryDirectory(prefix="spotpool-placement-") as tmp:
            results.append(one_run(strategy, args, Path(tmp)))
    print()
    print("| strategy | reclaims (A / B) | capacity gap (instance-s) | instance-hours A / B "
          "| spend (run + lost) |")  # fmt: skip
    print("|---|---|---|---|---|")
    for t in results:
        print(
            f"| {t.strategy} | {t.total_reclaims} ({t.reclaims.get(ZONE_A, 0)} / "
            f"{t.reclaims.get(ZONE_B, 0)}) | {t.gap_seconds:.0f} | {t.hours.get(ZONE_A, 0):.2f} / "
            f"{t.hours.get(ZONE_B, 0):.2f} | {t.spend:.2f} ({t.run_cost:.2f} + {t.lost_cost:.2f}) |"
        )
    if len(results) == 2 and results[0].total_reclaims and results[0].gap_seconds:
        base, learned = results
        print(
            f"\nlearned/price-only: reclaims x{learned.total_reclaims / base.total_reclaims:.2f}, "
            f"gap x{learned.gap_seconds / base.gap_seconds:.2f}, "
            f"spend x{learned.spend / base.spend:.2f}"
        )


if __name__ == "__main__":
    main()
