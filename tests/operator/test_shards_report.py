"""`spotpool shards`: the report from the Leases and the pools (pure)."""

from datetime import UTC, datetime, timedelta

import kubernetes
import pytest
from spotpool_operator.replicas.sharding import shard_of
from spotpool_operator.replicas.shards import SHARDS_ANNOTATION
from spotpool_operator.replicas.shards_cli import UNHELD, render_text, shard_count, summarize

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 24, 15, 0, tzinfo=UTC)


def _lease(name: str, holder: str, renewed_ago: float, shards: int | None = None) -> object:
    annotations = {SHARDS_ANNOTATION: str(shards)} if shards else None
    return kubernetes.client.V1Lease(
        metadata=kubernetes.client.V1ObjectMeta(name=name, annotations=annotations),
        spec=kubernetes.client.V1LeaseSpec(
            holder_identity=holder, lease_duration_seconds=30,
            renew_time=NOW - timedelta(seconds=renewed_ago),
        ),
    )  # fmt: skip


def test_who_holds_which_shards_and_how_many_pools_each_serves() -> None:
    leases = [
        _lease("op-member-pod-a", "pod-a_1234abcd", 2, shards=4),
        _lease("op-member-pod-b", "pod-b_5678abcd", 3, shards=4),
        _lease("op-member-pod-c", "pod-c_0000abcd", 90, shards=4),  # dead
        _lease("op-shard-0", "pod-a_1234abcd", 2),
        _lease("op-shard-1", "pod-b_5678abcd", 3),
        _lease("op-shard-2", "pod-c_0000abcd", 90),  # expired: nobody's
        _lease("op-shard-3", "pod-a_1234abcd", 2),
    ]
    assert shard_count(leases, "op") == 4
    uids = [f"uid-{i}" for i in range(40)]
    report = summarize(leases, "op", 4, uids, NOW)
    assert [r.holder for r in report.shards] == ["pod-a", "pod-b", UNHELD, "pod-a"]
    per_shard = [sum(shard_of(u, 4) == s for u in uids) for s in range(4)]
    assert [r.pools for r in report.shards] == per_shard
    replicas = {r.replica: r for r in report.replicas}
    assert replicas["pod-a"].shards == [0, 3]
    assert replicas["pod-a"].pools == per_shard[0] + per_shard[3]
    assert replicas["pod-b"].shards == [1] and replicas[UNHELD].shards == [2]
    assert "pod-c" not in replicas
    text = render_text(report)
    assert "pod-a" in text and "40 pool(s), 4 shard(s)" in text
