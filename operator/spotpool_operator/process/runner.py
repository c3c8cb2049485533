"""Assemble the operator (cluster access, engine, metrics, handlers) and run kopf until stopped."""

import logging
import os
import socket
from collections.abc import Callable
from functools import partial
from typing import Any
from uuid import uuid4

import kopf

from spotpool.api.placement_report import offerings
from spotpool.api.stackconfig import PoolIdentity
from spotpool.engine.fencing.ownership import Writer
from spotpool.engine.fencing.processes import kill_runs
from spotpool.engine.leftovers.accounts import AccountRecord, recorded_accounts, save_account
from spotpool.engine.leftovers.holdings import backend_holdings
from spotpool.engine.leftovers.install_marker import mark_install
from spotpool.engine.stacks.stack import PoolStack, forget_stack
from spotpool.engine.stacks.stack_guard import StackOwnership
from spotpool.engine.tencent import cloud
from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.ratelimit import BUCKETS
from spotpool.engine.tencent.tag_pairs import TagPairs
from spotpool_operator.basics.credentials import credentials_of
from spotpool_operator.basics.settings import OperatorSettings
from spotpool_operator.cloud.capacity import Capacity, CapacitySettings, stock_lister
from spotpool_operator.cloud.claims import IdentityClaims
from spotpool_operator.cloud.cloud_claims import CloudClaims
from spotpool_operator.cloud.cost import PriceBook, gpu_lister, price_lister
from spotpool_operator.cloud.fleet import FleetProbe
from spotpool_operator.cloud.interruptions import (
    ConfigMapStore,
    Learner,
    LearnerSettings,
    MemoryStore,
)
from spotpool_operator.cloud.strays import Backend, StraySweep
from spotpool_operator.process import handlers, kopf_namespaces
from spotpool_operator.process.cloudcheck import cloud_lookup
from spotpool_operator.process.lease_home import warn_about_lease_home
from spotpool_operator.process.reconciler import Reconciler
from spotpool_operator.replicas.lease_holders import lease_holders
from spotpool_operator.replicas.shards import ShardLeases
from spotpool_operator.reporting.events import DirectEvents, KopfEvents
from spotpool_operator.reporting.kube import KubeCluster
from spotpool_operator.reporting.metrics import Metrics
from spotpool_operator.reporting.offering_metrics import OfferingMetrics

log = logging.getLogger("spotpool_operator")


def run(settings: OperatorSettings) -> None:
    """Serve Spotpools until SIGINT/SIGTERM. Blocks."""
    metrics = Metrics()
    BUCKETS.configure(settings.rate_limits)
    endpoint = settings.engine.cloud_endpoint

    def fleet(credentials: Credentials, region: str) -> list[cloud.FleetInstance]:
        return cloud.fleet_instances(cloud.cvm(credentials, region, endpoint))

    def count(credentials: Credentials, region: str) -> int:
        return cloud.count_fleet(cloud.cvm(credentials, region, endpoint))

    probe = FleetProbe(fleet, settings.probe, count) if settings.probe.budget > 0 else None
    cloud.ON_CALL.append(metrics.observe_cloud_call)
    metrics.watch_buckets(BUCKETS)
    if settings.metrics_port:
        metrics.serve(settings.metrics_host, settings.metrics_port)
    cluster = KubeCluster()
    warn_about_lease_home(cluster.core(), settings.lease_namespace)
    kube_uid = _identify_cluster(settings, cluster)
    host, pid = socket.gethostname(), os.getpid()
    shards = None
    if settings.lease_namespace:
        shards = ShardLeases(
            cluster.coordination(),
            settings.lease_namespace,
            settings.lease_name,
            settings.shards,
            duration=settings.lease_duration,
            registry=metrics.registry,
        )
    claims = identity_claims(settings, cluster, shards, kube_uid)
    settings.engine.writer = Writer(host, pid, None)  # each pool's engine: its shard's Lease

    def engine(
        pool: PoolIdentity, credentials: Credentials, region: str, progress: Callable[[str], None]
    ) -> PoolStack:
        engine_settings = settings.engine
        if shards is not None:  # locks are broken for the earlier holders of the pool's shard
            writer = Writer(host, pid, shards.view(pool.uid))
            engine_settings = engine_settings.model_copy(update={"writer": writer})
        return PoolStack(pool, engine_settings, credentials, region, progress)

    prices = PriceBook(price_lister(endpoint), gpu_lister=gpu_lister(endpoint))
    offering_metrics = OfferingMetrics(metrics.registry)
    # Beside the install's Leases; run by hand with no Lease namespace, there is no install to
    # share the counts with (nor rights to a ConfigMap): they are kept in memory.
    store = (
        ConfigMapStore(
            cluster.core(), settings.lease_namespace, f"{settings.lease_name}-interruptions"
        )
        if settings.lease_namespace
        else MemoryStore()
    )
    learner = Learner(
        store,
        writer=host,  # a pod's name: each replica writes its own key of the ConfigMap
        settings=LearnerSettings(half_life=settings.interruption_half_life),
        on_sync=offering_metrics.observe_learned,
    )
    reconciler = Reconciler(
        settings=settings,
        cluster=cluster,
        events=KopfEvents(),
        metrics=metrics,
        engine_factory=engine,
        cloud_lookup=cloud_lookup(settings.engine.cloud_endpoint),
        probe=probe,
        shards=shards,
        capacity=Capacity(
            prices.sharing(stock_lister(endpoint)),
            CapacitySettings(avoid_seconds=settings.avoid_seconds),
            learner=learner,
            endpoint=endpoint,
            on_offerings=lambda account, region, wants: offering_metrics.observe_offerings(
                account, region, offerings(wants)
            ),
        ),
        prices=prices,
    )
    reconciler.claims = claims
    reconciler.direct_events = DirectEvents(cluster.core())  # its Events outside kopf's handlers
    if settings.sweep != "off":
        reconciler.strays = _stray_sweep(settings, cluster, fleet, shards, metrics)
        reconciler.strays.orphaned.gauge = metrics.stacks_orphaned.set
        # A fresh verdict right before each pass, the cloud accounts' claims read with it.
        reconciler.strays.hold = partial(claims.check, sweeping=True)
        claims.cloud = _cloud_claims(reconciler.strays, settings.engine.cloud_endpoint)
        reconciler.strays.account_hold = claims.cloud.unproven
    registry = kopf.OperatorRegistry()
    handlers.register(registry, reconciler)
    kopf_settings = kopf.OperatorSettings()
    handlers.configure(
        kopf_settings, shards.serves if shards is not None else None, settings.operator_class
    )
    if shards is not None:
        _stop_shards_work(shards, reconciler, settings)
    where = "all namespaces" if settings.all_namespaces else ", ".join(settings.namespaces)
    log.info(
        "serving Spotpools in %s; backend %s; cloud %s; %d operation(s) at once",
        where,
        settings.engine.backend_for_display(),
        settings.engine.cloud_endpoint or "Tencent Cloud",
        settings.max_concurrent,
    )
    kopf_namespaces.install()
    try:
        kopf.run(
            registry=registry,
            settings=kopf_settings,
            standalone=True,
            clusterwide=settings.all_namespaces,
            namespaces=settings.namespaces,
            liveness_endpoint=settings.liveness_endpoint(),
        )
    finally:
        reconciler.close()


def _identify_cluster(settings: OperatorSettings, cluster: KubeCluster) -> str | None:
    """The cluster's identity, tagged on every instance beside the install's: --cluster-id, or
    the kube-system Namespace's uid (returned, when it could be read). Without it nothing could
    be proven this cluster's."""
    explicit = settings.engine.cluster_id
    try:
        kube_uid: str | None = cluster.cluster_uid()
    except Exception as error:
        if not explicit:
            raise SystemExit(
                f"cannot read the kube-system Namespace for the cluster's identity ({error}): "
                "grant the operator `get` on namespaces/kube-system (the chart does), or set "
                "--cluster-id (SPOTPOOL_CLUSTER_ID, chart value clusterId)"
            ) from None
        kube_uid = None
    if explicit:
        if kube_uid is not None and explicit != kube_uid:
            # A copied value makes two live clusters one: the claims (cloud/claims.py) hold
            # both then, but a person should know at start.
            log.warning(
                "cluster id %s (--cluster-id) differs from this cluster's kube-system uid %s: "
                "every instance is tagged with %s; no other live cluster may use it "
                "(docs/shards.md, 'One identity, one cluster')", explicit, kube_uid, explicit,
            )  # fmt: skip
        else:
            log.info("cluster id %s (--cluster-id)", explicit)
        return kube_uid
    settings.engine.cluster_id = kube_uid
    log.info("cluster id %s (the kube-system Namespace's uid)", settings.engine.cluster_id)
    return kube_uid


def identity_claims(
    settings: OperatorSettings, cluster: KubeCluster, shards: ShardLeases | None,
    kube_uid: str | None,
) -> IdentityClaims:  # fmt: skip
    """This process's claim of its identity, written and checked once before anything is
    served; every stack run asks it (and the stacks' holder records) through the engine's
    guard."""
    engine = settings.engine
    assert engine.cluster_id is not None
    nonce = shards.identity if shards is not None else f"{socket.gethostname()}_{uuid4().hex[:8]}"
    lease = f"{settings.lease_namespace}/{settings.lease_name}" if shards is not None else None
    holders = (
        lease_holders(cluster.coordination(), settings.lease_namespace, settings.lease_name)
        if shards is not None and settings.lease_namespace
        else None
    )
    claims = IdentityClaims(
        engine.backend_url, engine.cluster_id, engine.install_id, nonce, kube_uid, lease,
        holders, settings.lease_duration,
    )  # fmt: skip
    claims.check()
    engine.guard = StackOwnership(
        engine.backend_url, engine.cluster_id, claims.conflict, settings.take_over_from,
        settings.take_over_after, kube_uid,
    )  # fmt: skip
    return claims


def _cloud_claims(strays: StraySweep, endpoint: str | None) -> CloudClaims:
    """This process's identity claim in each account the sweep looks at (its accounts now)."""

    def accounts() -> list[tuple[Credentials, str]]:
        return [(a.credentials, a.region) for a in list(strays.accounts.values())]

    return CloudClaims(accounts, TagPairs(endpoint))


def _stray_sweep(
    settings: OperatorSettings,
    cluster: KubeCluster,
    fleet: Callable[[Credentials, str], list[cloud.FleetInstance]],
    shards: ShardLeases | None,
    metrics: Metrics,
) -> StraySweep:
    """The sweep of deleted pools' instances: the cloud, the cluster's pools, the backend
    (the install's marker written there at its first start: holdings.py trusts it from then)."""
    engine = settings.engine
    backend_url, endpoint = engine.backend_url, engine.cloud_endpoint
    try:
        mark_install(backend_url, engine.install_id, engine.cluster_id)
    except Exception as error:  # the sweep reports only until it is there
        log.warning("install marker not written in the state backend: %s", error)

    def terminate(
        credentials: Credentials, region: str, ids: list[str], check: Callable[[], None]
    ) -> None:
        cloud.terminate(cloud.cvm(credentials, region, endpoint), ids, check)

    def resolve(record: AccountRecord) -> Credentials:
        return credentials_of(cluster, record, endpoint, settings.operator_class)

    return StraySweep(
        fleet,
        terminate,
        cluster.pool_uids,
        shards.serves if shards is not None else lambda uid: True,
        DirectEvents(cluster.core()),  # outside kopf's handlers: no kopf event queue there
        engine.install_id,
        engine.orphan_min_age,
        Backend(
            holdings=partial(backend_holdings, backend_url, engine.install_id),
            save_account=partial(save_account, backend_url),
            recorded_accounts=partial(recorded_accounts, backend_url),
        ),
        cluster_id=engine.cluster_id,
        mode=settings.sweep,
        resolve=resolve,
        on_swept=metrics.orphans_swept.inc,
        on_reported=metrics.orphans_reported.inc,
        pool_names=cluster.pool_names,
        install_object=_install_lease(settings),
    )


def _install_lease(settings: OperatorSettings) -> dict[str, Any] | None:
    """The object the sweep's Events about the whole install go to: its Lease."""
    if not settings.lease_namespace:
        return None
    metadata = {"namespace": settings.lease_namespace, "name": settings.lease_name}
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata}


def _stop_shards_work(
    shards: ShardLeases, reconciler: Reconciler, settings: OperatorSettings
) -> None:
    """A shard lost or given up: kill its stacks' runs (plugins too) and forget its pools; the
    replica count changed: take this replica's share of each account's operations and API
    rates."""

    def stop(shard: int, uids: list[str]) -> None:  # in the Leases' thread
        killed = []
        for uid in uids:
            stack = shards.stack_of(uid)
            if stack:
                killed += kill_runs(stack)
                forget_stack(stack)  # another replica writes it now: nothing cached holds
        if killed:
            log.warning("shard %d: killed runs %s", shard, killed)
        shards.call_soon(partial(reconciler.drop, uids))

    def replicas(count: int) -> None:  # in the event loop
        reconciler.replicas_changed(count)
        limits = settings.rate_limits
        BUCKETS.configure(limits.model_copy(update={"share": limits.share / max(1, count)}))

    shards.on_stop.append(stop)
    shards.on_replicas.append(replicas)
