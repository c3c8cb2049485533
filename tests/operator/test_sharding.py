"""Shards: a pool's shard is a stable hash of its uid; shards are divided among replicas, each
holding its share, and a change of replicas moves as few shards as it can."""

import random
import uuid
from collections import Counter

import pytest
from spotpool_operator.replicas.sharding import (
    assign,
    member_lease_name,
    moves,
    quotas,
    shard_lease_name,
    shard_of,
)

pytestmark = pytest.mark.unit


def test_a_pools_shard_is_stable_and_spread_evenly() -> None:
    # Pinned: a pool's shard is part of the contract between versions (a rolling upgrade runs
    # both); a change of the hash moves pools between shards and fails here.
    pinned = {
        "6f1c5a52-2f0e-4a43-9d36-0d8f7f3d7c11": [1, 1, 3, 15, 47],
        "0b7e2d1c-9a44-4f3e-8c51-2d6a9e0f1b23": [0, 1, 0, 0, 16],
        "f3a9c4e0-1d2b-4c5e-9f60-7a8b9c0d1e2f": [0, 1, 0, 8, 56],
        "uid-1": [1, 0, 3, 7, 55],
    }
    for uid, shards in pinned.items():
        assert [shard_of(uid, n) for n in (2, 3, 4, 16, 64)] == shards, uid
    assert shard_of("6f1c5a52-2f0e-4a43-9d36-0d8f7f3d7c11", 1) == 0
    spread = Counter(shard_of(str(uuid.UUID(int=random.Random(7).getrandbits(128) + i)), 16)
                     for i in range(4000))  # fmt: skip
    assert sorted(spread) == list(range(16))
    assert max(spread.values()) < 1.3 * 4000 / 16
    with pytest.raises(ValueError, match="at least 1"):
        shard_of("x", 0)


def test_lease_names() -> None:
    assert shard_lease_name("spotpool-operator", 1, 0) == "spotpool-operator"  # as before
    assert shard_lease_name("spotpool-operator", 16, 3) == "spotpool-operator-shard-3"
    assert member_lease_name("op", "Pod_A.1") == "op-member-pod-a-1"


def _counts(plan: dict[int, str]) -> Counter[str]:
    return Counter(plan.values())


def test_one_replica_holds_every_shard_and_a_second_takes_half() -> None:
    alone = assign(16, {}, ["a"])
    assert alone == {s: "a" for s in range(16)}
    two = assign(16, alone, ["a", "b"])
    assert _counts(two) == {"a": 8, "b": 8}
    assert moves(alone, two) == 8  # only b's half moves


def test_a_dead_replicas_shards_go_to_the_others_and_nothing_else_moves() -> None:
    three = assign(16, {}, ["a", "b", "c"])
    assert sorted(_counts(three).values()) == [5, 5, 6]
    current = {s: (m if m != "c" else None) for s, m in three.items()}  # c's leases expired
    two = assign(16, current, ["a", "b"])
    assert _counts(two) == {"a": 8, "b": 8}
    assert all(two[s] == m for s, m in three.items() if m != "c")  # a and b keep theirs
    assert moves(three, two) == _counts(three)["c"]


def test_the_extra_shard_goes_to_who_holds_it_already() -> None:
    current = {s: ("b" if s < 6 else "a") for s in range(16)}  # a: 10, b: 6
    assert quotas(16, ["a", "b", "c"], {"a": 10, "b": 6}) == {"a": 6, "b": 5, "c": 5}
    plan = assign(16, current, ["a", "b", "c"])
    assert moves(current, plan) == 5  # 4 of a's, 1 of b's: c's 5, nothing more


def test_every_assignment_is_balanced_complete_and_moves_the_fewest_shards() -> None:
    rng = random.Random(13)
    names = [f"r{i}" for i in range(6)]
    current: dict[int, str | None] = {}
    for _ in range(300):
        shards = 16
        members = rng.sample(names, rng.randint(1, 6))
        plan = assign(shards, current, members)
        assert sorted(plan) == list(range(shards))
        counts = _counts(plan)
        assert set(counts) <= set(members)
        assert max(counts.values()) - min(counts[m] for m in members) <= 1
        held = Counter(h for h in current.values() if h in members)
        share = quotas(shards, members, held)
        fewest = sum(max(0, held[m] - share[m]) for m in members) + sum(
            1 for s in range(shards) if current.get(s) not in members
        )
        assert moves({s: h for s, h in current.items() if h}, plan) == fewest
        # the next round: some holders die, some shards are not taken yet
        current = {s: (m if rng.random() > 0.1 else None) for s, m in plan.items()}
        assert assign(shards, current, members) == assign(shards, dict(current), reversed(members))
