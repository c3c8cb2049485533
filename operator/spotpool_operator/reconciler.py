"""Keep each pool converged: the reconciler is the engine runner (engine_runner.py) with the
jobs it does — converge (converge.py), reclaims (reclaims.py), termination notices
(notices.py), deletion (deletion.py)."""

from spotpool_operator.converge import Converging
from spotpool_operator.deletion import Deletion
from spotpool_operator.engine_runner import CloudLookup, EngineFactory, PoolEngine
from spotpool_operator.notices import Notices
from spotpool_operator.reclaims import Reclaims
from spotpool_operator.spot_return import SpotReturn

__all__ = ["CloudLookup", "EngineFactory", "PoolEngine", "Reconciler"]


class Reconciler(Converging, Reclaims, Notices, Deletion, SpotReturn):
    """What the kopf handlers call."""
