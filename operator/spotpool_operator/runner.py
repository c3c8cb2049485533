"""Assemble the operator (cluster access, engine, metrics, handlers) and run kopf until stopped."""

import logging
import os
import socket

import kopf

from spotpool.engine import cloud
from spotpool.engine.credentials import Credentials
from spotpool.engine.ownership import Writer
from spotpool.engine.processes import kill_runs
from spotpool.engine.ratelimit import BUCKETS
from spotpool.engine.stack import PoolStack
from spotpool_operator import handlers
from spotpool_operator.cloudcheck import cloud_lookup
from spotpool_operator.events import KopfEvents
from spotpool_operator.fleet import FleetProbe
from spotpool_operator.kube import KubeCluster
from spotpool_operator.lease import OperatorLease
from spotpool_operator.metrics import Metrics
from spotpool_operator.reconciler import Reconciler
from spotpool_operator.settings import OperatorSettings

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
    lease = None
    if settings.lease_namespace:
        lease = OperatorLease(
            cluster.coordination(),
            settings.lease_namespace,
            settings.lease_name,
            duration=settings.lease_duration,
        )
        lease.on_lost.append(lambda: log.warning("killed runs: %s", kill_runs()))
    settings.engine.writer = Writer(socket.gethostname(), os.getpid(), lease)
    reconciler = Reconciler(
        settings=settings,
        cluster=cluster,
        events=KopfEvents(),
        metrics=metrics,
        engine_factory=lambda pool, credentials, region, progress: PoolStack(
            pool, settings.engine, credentials, region, progress
        ),
        cloud_lookup=cloud_lookup(settings.engine.cloud_endpoint),
        probe=probe,
        lease=lease,
    )
    registry = kopf.OperatorRegistry()
    handlers.register(registry, reconciler)
    kopf_settings = kopf.OperatorSettings()
    handlers.configure(kopf_settings)
    where = "all namespaces" if settings.all_namespaces else ", ".join(settings.namespaces)
    log.info(
        "serving Spotpools in %s; backend %s; cloud %s; %d operation(s) at once",
        where,
        settings.engine.backend_for_display(),
        settings.engine.cloud_endpoint or "Tencent Cloud",
        settings.max_concurrent,
    )
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
