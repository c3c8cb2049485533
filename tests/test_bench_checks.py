"""The benchmarks' own checks can fail and compare fairly: nemesis's duplicate check sees two
lives of a slot overlapping inside one second, its bucket probe reads a replica's metrics, and
placement's reclaim schedule gives both strategies the same draws per offering and slot."""

from types import SimpleNamespace
from typing import Any

import pytest

from bench import nemesis, placement
from spotpool.api.stackconfig import TAG_POOL_UID, TAG_SLOT

pytestmark = pytest.mark.unit

UID, A, B = "uid-1", "ap-singapore-2", "ap-singapore-3"


def _instance(iid: str, slot: str, created: float, gone: float | None) -> dict[str, Any]:
    return {
        "InstanceId": iid, "InstanceState": "SHUTDOWN" if gone else "RUNNING",
        "Tags": [{"Key": TAG_POOL_UID, "Value": UID}, {"Key": TAG_SLOT, "Value": slot}],
        "CreatedTime": "2026-11-28T10:00:05Z", "CreatedAt": created,
        "Gone": gone is not None, "GoneAt": gone,
        "GoneTime": "2026-11-28T10:00:05Z" if gone else None,
    }  # fmt: skip


def test_two_lives_of_a_slot_overlapping_inside_one_second_are_a_duplicate() -> None:
    # The API's times of both read 10:00:05: only the unrounded ones tell the overlap.
    overlap = [_instance("ins-a", "0", 1000.1, 1000.7), _instance("ins-b", "0", 1000.4, None)]
    after = [_instance("ins-a", "0", 1000.1, 1000.4), _instance("ins-b", "0", 1000.7, None)]
    other_slot = [_instance("ins-a", "0", 1000.1, None), _instance("ins-b", "1", 1000.4, None)]
    assert nemesis._overlapping_slots(overlap) == 1
    assert nemesis._overlapping_slots(after) == 0
    assert nemesis._overlapping_slots(other_slot) == 0


def test_an_overlap_counts_in_its_own_round_only() -> None:
    """The emulator's whole history is listed every round: an overlap of round 1 is not a
    duplicate of round 2 (begun at 2000)."""
    earlier = [_instance("ins-a", "0", 1000.1, 1000.7), _instance("ins-b", "0", 1000.4, None)]
    assert nemesis._overlapping_slots(earlier, since=1000.0) == 1
    assert nemesis._overlapping_slots(earlier, since=2000.0) == 0
    later = [*earlier, _instance("ins-c", "1", 2000.5, 2001.0),
             _instance("ins-d", "1", 2000.8, None)]  # fmt: skip
    assert nemesis._overlapping_slots(later, since=2000.0) == 1


def test_a_failed_preview_stays_a_failure_in_the_summary() -> None:
    rounds = [{"duplicates": 0, "changed_stacks": -1}, {"duplicates": 1, "changed_stacks": 0}]
    summary = nemesis._findings(rounds)
    assert "changed_stacks 0 (FAILED in 1 round(s))" in summary
    assert "duplicates 1" in summary and "duplicates 1 (" not in summary


def test_the_bucket_probe_reads_the_replicas_run_instances_fill() -> None:
    def world(text: str) -> Any:
        return SimpleNamespace(metrics=lambda: text)

    line = 'spotpool_cloud_api_bucket_fill_ratio{{account="",region="ap-singapore",action="{}"}} {}'
    empty = "\n".join([line.format("RunInstances", "0.0"), line.format("DescribeInstances", "1.0")])
    full = "\n".join([line.format("RunInstances", "0.5"), line.format("DescribeInstances", "0.0")])
    assert nemesis._bucket_empty(world(empty), "RunInstances")
    assert not nemesis._bucket_empty(world(full), "RunInstances")
    assert not nemesis._bucket_empty(world(""), "RunInstances")  # no call made yet: no bucket


def _slot(iid: str, zone: str, pool: str, slot: str) -> dict[str, str]:
    return {"id": iid, "zone": zone, "type": placement.TYPE, "pool": pool, "slot": slot}


def test_the_reclaim_schedule_is_the_same_draws_whatever_else_runs() -> None:
    schedule = placement.Schedule(7, {(A, placement.TYPE): 0.05, (B, placement.TYPE): 0.005})
    # Run 1 put pool-00/0 in A beside many others; run 2 put it in A alone, the rest in B.
    crowded = [_slot(f"i{n}", A, f"pool-{n:02d}", "0") for n in range(20)]
    alone = [_slot("j0", A, "pool-00", "0")] + [
        _slot(f"j{n}", B, f"pool-{n:02d}", "0") for n in range(1, 20)
    ]
    hits_crowded = [s for s in range(600) if "i0" in schedule.doomed(s, crowded)]
    hits_alone = [s for s in range(600) if "j0" in schedule.doomed(s, alone)]
    assert hits_crowded == hits_alone and hits_crowded  # the same seconds, and some
    # About the offering's rate (0.05 a second: 30 in 600 s), and another seed draws anew.
    assert 15 <= len(hits_crowded) <= 50
    other = placement.Schedule(8, schedule.rates)
    assert [s for s in range(600) if "i0" in other.doomed(s, crowded)] != hits_crowded
    # B's slots face B's (tenfold lower) rate.
    in_b = sum(len(schedule.doomed(s, alone[1:])) for s in range(600))
    in_a = sum(len(schedule.doomed(s, crowded[1:])) for s in range(600))
    assert in_b < in_a / 4
