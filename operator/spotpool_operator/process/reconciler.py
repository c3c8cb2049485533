"""Keep each pool converged: the reconciler is the engine runner (engine_runner.py) with the
jobs it does — converge (converge.py), reclaims (reclaims.py), termination notices
(notices.py), deletion (deletion.py), withdrawn grants (revocations.py), identity claims
(identity_watch.py), the look at pools' nodes (node_looks.py)."""

from spotpool_operator.convergence.converge import Converging
from spotpool_operator.convergence.deletion import Deletion
from spotpool_operator.convergence.engine_runner import CloudLookup, EngineFactory, PoolEngine
from spotpool_operator.convergence.identity_watch import IdentityWatch
from spotpool_operator.convergence.node_looks import NodeLooks
from spotpool_operator.convergence.revocations import Revocations
from spotpool_operator.storm.notices import Notices
from spotpool_operator.storm.reclaims import Reclaims
from spotpool_operator.storm.spot_return import SpotReturn

__all__ = ["CloudLookup", "EngineFactory", "PoolEngine", "Reconciler"]


class Reconciler(
    Converging, Reclaims, Notices, Deletion, SpotReturn, Revocations, IdentityWatch, NodeLooks
):
    """What the kopf handlers call."""
