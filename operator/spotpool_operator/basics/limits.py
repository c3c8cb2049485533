"""A namespace's limits (SpotpoolAccessPolicy.spec.limits) applied to one pool: the count it may
have now, from what the other pools of its namespace hold (their last written status) and what
it runs itself. A pool is held at the limit, never cut below what it runs."""

from spotpool.api.access import Hold, Use, held_count
from spotpool.api.gpus import gpus_of
from spotpool.api.spec import SpotpoolSpec
from spotpool.api.status import SpotpoolStatus
from spotpool_operator.basics.credentials import access_of
from spotpool_operator.reporting.kube import Cluster, PoolUse


def hold(
    cluster: Cluster, namespace: str, uid: str, spec: SpotpoolSpec, status: SpotpoolStatus
) -> Hold:
    access = access_of(cluster, namespace)
    desired = spec.desired_count()
    if not access.limits():
        return Hold(desired, "")
    others = [use_of(p) for p in cluster.pools_in(namespace) if p.uid != uid]
    taken = Use(
        instances=sum(u.instances for u in others),
        gpus=sum(u.gpus for u in others),
        hourly_cost=sum(u.hourly_cost for u in others),
    )
    running = len(status.instances)
    gpus_each = max((gpus_of(t) or 0 for t in spec.types()), default=0) or None
    cost_each = status.hourly_cost / running if status.hourly_cost and running else None
    return held_count(access, desired, Use(instances=running), taken, gpus_each, cost_each)


def use_of(pool: PoolUse) -> Use:
    """What a pool holds: its instances, or more while it converges up to status.replicas."""
    instances = pool.status.get("instances") or []
    count = max(int(pool.status.get("replicas") or 0), len(instances))
    first = pool.instance_types[0] if pool.instance_types else None
    gpus = sum(gpus_of(i.get("instanceType")) or 0 for i in instances)
    gpus += (count - len(instances)) * (gpus_of(first) or 0)
    return Use(count, gpus, float(pool.status.get("hourlyCost") or 0.0))


def held_spec(spec: SpotpoolSpec, count: int) -> SpotpoolSpec:
    """The spec with its desired count lowered to `count` (what the pool converges to)."""
    if count >= spec.desired_count():
        return spec
    return spec.model_copy(update={"replicas": count, "minimum": min(spec.minimum, count)})
