"""The emulator's reclaim rates per zone x instance type (`--reclaim-rates`), drawn from a
seeded generator: a cheap, unreliable zone beside a calm one."""

from pathlib import Path

import pytest

from spotpool.emulator.instances import Disk, InstanceRecord
from spotpool.emulator.reclaim_rates import ReclaimRates, parse_rate, parse_rates
from spotpool.emulator.server import Emulator
from spotpool.emulator.store import CloudStore
from spotpool.emulator.world import Settings, World

pytestmark = pytest.mark.unit

BUSY, CALM, KIND = "ap-guangzhou-3", "ap-guangzhou-4", "GN7.2XLARGE32"


def test_rates_parse_with_or_without_the_unit_and_bad_ones_say_what_to_write() -> None:
    assert parse_rate(f"{BUSY}/{KIND}=6/h") == ((BUSY, KIND), 6.0)
    assert parse_rates([f"{CALM}/{KIND}=0.5"]) == {(CALM, KIND): 0.5}
    for bad, says in (
        (f"{BUSY}={KIND}", "expected ZONE/TYPE=RATE/h"),
        (f"mars-1/{KIND}=6/h", "unknown zone mars-1"),
        (f"{BUSY}/GN99=6/h", "unknown instance type GN99"),
    ):
        with pytest.raises(ValueError, match=says):
            parse_rate(bad)


def test_a_zone_x_type_rate_overrides_the_flat_one() -> None:
    rates = ReclaimRates(0.36, {(BUSY, KIND): 36.0})
    assert rates.per_second(BUSY, KIND) == pytest.approx(0.01)
    assert rates.per_second(CALM, KIND) == pytest.approx(0.0001)
    assert ReclaimRates().any() is False and rates.any() is True


def _running(zone: str, n: int) -> InstanceRecord:
    return InstanceRecord(
        instance_id=f"ins-{zone[-1]}{n:07d}", uuid="u", region="ap-guangzhou", zone=zone,
        instance_type=KIND, charge_type="SPOTPAID", image_id="img-1", name="n",
        vpc_id="vpc-1", subnet_id="subnet-1", private_ip="172.16.0.2",
        system_disk=Disk(disk_id="disk-1", disk_type="CLOUD_PREMIUM", disk_size=50),
        created=0.0, transition_until=0.0,
    )  # fmt: skip


def _seconds_of_reclaims(tmp_path: Path, seed: int) -> list[str]:
    world = World(CloudStore(tmp_path / f"cloud-{seed}.db"), Settings(boot_seconds=0))
    for n in range(50):
        for zone in (BUSY, CALM):
            world.touch(_running(zone, n))
    emulator = Emulator(world, reclaim_rates={(BUSY, KIND): 360.0, (CALM, KIND): 36.0}, seed=seed)
    taken: list[str] = []
    for _ in range(30):
        taken += emulator.reclaim_step()
    return taken


def test_the_busy_zone_loses_about_ten_times_as_many_and_a_seed_repeats_the_draws(
    tmp_path: Path,
) -> None:
    taken = _seconds_of_reclaims(tmp_path, seed=7)
    busy = sum(1 for i in taken if i.startswith("ins-3"))
    calm = len(taken) - busy
    # 50 instances for 30 s at 0.1/s and 0.01/s: about 48 and 13 (binomial; bounds wide)
    assert busy >= 30 and calm <= 25 and busy > 2 * calm
    assert _seconds_of_reclaims(tmp_path, seed=7) == taken
    assert _seconds_of_reclaims(tmp_path, seed=8) != taken
