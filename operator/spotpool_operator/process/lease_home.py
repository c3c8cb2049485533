"""What the operator says at start about where it keeps its Leases and learned rates: a
`--lease-namespace` that does not exist is a warning (nothing can be kept there until it is
made), and no namespace at all means the learned interruption rates live in memory only."""

import logging
from typing import Any

import kubernetes

log = logging.getLogger("spotpool_operator")

MEMORY_ONLY = (
    "no --lease-namespace: learned interruption rates are kept in this process's memory only "
    "(lost when it stops, and not seen by `spotpool offerings`); give --lease-namespace to "
    "keep them in a ConfigMap"
)


def lease_home_problem(core: Any, namespace: str | None) -> str | None:
    """The warning to log about the Lease namespace, if any (None: all is well, or it could
    not be told: a refused read is not a missing namespace)."""
    if not namespace:
        return MEMORY_ONLY
    try:
        core.read_namespace(namespace)
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return (
                f"--lease-namespace {namespace}: no such namespace; the install's Leases and "
                f"learned interruption rates cannot be kept there until it exists "
                f"(kubectl create namespace {namespace})"
            )
    except Exception:  # the API server's troubles show in the handlers
        return None
    return None


def warn_about_lease_home(core: Any, namespace: str | None) -> None:
    problem = lease_home_problem(core, namespace)
    if problem is not None:
        log.warning(problem)
