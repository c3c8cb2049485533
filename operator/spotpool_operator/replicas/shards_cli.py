"""`spotpool shards`: which replica holds which shards, and how many pools each serves — read
from the shard and membership Leases and the Spotpools, as any replica sees them."""

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import typer
from pydantic import BaseModel

from spotpool_operator.replicas.sharding import MEMBER_INFIX, shard_lease_name, shard_of
from spotpool_operator.replicas.shards import SHARDS_ANNOTATION

UNHELD = "(nobody)"


class Format(StrEnum):
    text = "text"
    json = "json"


class ShardRow(BaseModel):
    shard: int
    holder: str  # the holding replica's hostname, or UNHELD
    pools: int
    renewed_seconds_ago: float | None


class ReplicaRow(BaseModel):
    replica: str
    shards: list[int]
    pools: int


class ShardReport(BaseModel):
    shards: list[ShardRow]
    replicas: list[ReplicaRow]
    pools: int


def live_holder(lease: Any, now: datetime, default_duration: float) -> str | None:
    """The Lease's holder, as a one-off look by wall clock sees it (renewed within its
    duration). For a person's report only: the replicas never decide on wall clocks
    (lease.py), and a replica whose clock is off shows up here as a holder renewed in the
    future or long ago."""
    spec = lease.spec
    holder = spec.holder_identity or ""
    renewed = spec.renew_time or spec.acquire_time
    if not holder or renewed is None:
        return None
    duration = spec.lease_duration_seconds or default_duration
    return str(holder) if now <= renewed + timedelta(seconds=duration) else None


def hostname_of(identity: str) -> str:
    """A holder identity is `<hostname>_<8 hex>`: the hostname is what a person knows."""
    return identity.rsplit("_", 1)[0] if "_" in identity else identity


def shard_count(leases: list[Any], base: str) -> int | None:
    """What the replicas say they use (their member Leases), or None."""
    for lease in leases:
        if lease.metadata.name.startswith(base + MEMBER_INFIX):
            value = (lease.metadata.annotations or {}).get(SHARDS_ANNOTATION)
            if value and value.isdigit():
                return int(value)
    return None


def summarize(
    leases: list[Any], base: str, shards: int, pool_uids: list[str], now: datetime
) -> ShardReport:
    """The report from the Leases of the operator's namespace and the pools' uids (pure)."""
    by_name = {lease.metadata.name: lease for lease in leases}
    per_shard = Counter(shard_of(uid, shards) for uid in pool_uids)
    rows = []
    for shard in range(shards):
        lease = by_name.get(shard_lease_name(base, shards, shard))
        holder = live_holder(lease, now, 30.0) if lease is not None else None
        renewed = (lease.spec.renew_time or lease.spec.acquire_time) if lease is not None else None
        rows.append(
            ShardRow(
                shard=shard,
                holder=hostname_of(holder) if holder else UNHELD,
                pools=per_shard.get(shard, 0),
                renewed_seconds_ago=round((now - renewed).total_seconds(), 1) if renewed else None,
            )
        )
    members = {
        hostname_of(holder)
        for name, lease in by_name.items()
        if name.startswith(base + MEMBER_INFIX) and (holder := live_holder(lease, now, 30.0))
    }
    replicas = []
    for replica in sorted(members | {r.holder for r in rows}):
        mine = [r for r in rows if r.holder == replica]
        replicas.append(
            ReplicaRow(replica=replica, shards=[r.shard for r in mine],
                       pools=sum(r.pools for r in mine))
        )  # fmt: skip
    return ShardReport(shards=rows, replicas=replicas, pools=len(pool_uids))


def render_text(report: ShardReport) -> str:
    lines = [f"{'SHARD':<6} {'HOLDER':<40} {'POOLS':>5}  RENEWED"]
    for row in report.shards:
        ago = "-" if row.renewed_seconds_ago is None else f"{row.renewed_seconds_ago:.0f}s ago"
        lines.append(f"{row.shard:<6} {row.holder:<40} {row.pools:>5}  {ago}")
    lines += ["", f"{'REPLICA':<40} {'SHARDS':>6} {'POOLS':>5}  WHICH"]
    for replica in report.replicas:
        which = ",".join(str(s) for s in replica.shards) or "-"
        lines.append(f"{replica.replica:<40} {len(replica.shards):>6} {replica.pools:>5}  {which}")
    lines.append(f"\n{report.pools} pool(s), {len(report.shards)} shard(s)")
    return "\n".join(lines)


def shards(
    lease_namespace: str = typer.Option(
        "spotpool-system",
        "--lease-namespace",
        envvar="SPOTPOOL_LEASE_NAMESPACE",
        help="The operator's namespace (where its Leases are).",
    ),
    lease_name: str = typer.Option(
        "spotpool-operator", "--lease-name", envvar="SPOTPOOL_LEASE_NAME", help="Lease base name."
    ),
    count: int | None = typer.Option(
        None,
        "--shards",
        min=1,
        help="Shard count; default: what the replicas' membership Leases say (else 16).",
    ),
    output: Format = typer.Option(Format.text, "--format", help="text or json."),
) -> None:
    """Which replica holds which shards and how many pools each serves."""
    import kubernetes

    from spotpool.api.spec import GROUP, PLURAL, VERSION
    from spotpool_operator.reporting.kube import KubeCluster

    cluster = KubeCluster()
    try:
        coordination: Any = cluster.coordination()
        leases = coordination.list_namespaced_lease(lease_namespace).items
        custom: Any = kubernetes.client.CustomObjectsApi(coordination.api_client)
        pools = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
    except kubernetes.client.ApiException as error:
        raise typer.BadParameter(
            f"the cluster answered {error.status} {error.reason}: reading Leases in "
            f"{lease_namespace} and Spotpools in every namespace needs those rights"
        ) from None
    total = count or shard_count(leases, lease_name) or 16
    uids = [str(pool["metadata"]["uid"]) for pool in pools]
    report = summarize(leases, lease_name, total, uids, datetime.now(UTC))
    if output is Format.json:
        typer.echo(json.dumps(report.model_dump(), indent=2))
    else:
        typer.echo(render_text(report))
