"""Who holds this install's Leases and when each last renewed: what vouches for a live
claimant of the install's identity (cloud/claims.py)."""

from collections.abc import Callable, Mapping
from typing import Any

from spotpool_operator.replicas.sharding import of_install

# identity -> renewTime (epoch) of the install's Leases in this cluster, read now
LeaseHolders = Callable[[], Mapping[str, float]]


def lease_holders(api: Any, namespace: str, base: str, timeout: float = 10.0) -> LeaseHolders:
    """The holders of this install's Leases (single, shard and membership ones) and when each
    last renewed, from a CoordinationV1Api."""

    def read() -> dict[str, float]:
        found: dict[str, float] = {}
        listed = api.list_namespaced_lease(namespace, _request_timeout=timeout)
        for item in listed.items:
            spec = item.spec
            if not of_install(base, item.metadata.name) or spec is None:
                continue
            when = spec.renew_time or spec.acquire_time
            if spec.holder_identity and when is not None:
                stamp = when.timestamp()
                found[spec.holder_identity] = max(stamp, found.get(spec.holder_identity, stamp))
        return found

    return read
