"""What the operator holds per Spotpool: a snapshot of the resource and the pool's live state."""

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spotpool.api.spec import GROUP, KIND, VERSION
from spotpool.api.stackconfig import PoolIdentity, StackConfig
from spotpool.api.status import AcceptedNotice, Checkpoint, Placement, SpotpoolStatus
from spotpool.engine.stacks.disruption import DO_NOT_DISRUPT, parse_do_not_disrupt
from spotpool.engine.tencent.credentials import Credentials


@dataclass(frozen=True)
class PoolRef:
    """One Spotpool as kopf handed it over: identity, generation, raw spec and status."""

    namespace: str
    name: str
    uid: str
    generation: int | None
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger] = field(
        default=logging.getLogger("spotpool_operator"), compare=False
    )
    # Slots the do-not-disrupt annotation lists: a rollout replaces them last (disruption.py).
    do_not_disrupt: frozenset[int] = field(default=frozenset(), compare=False)

    @classmethod
    def from_body(
        cls,
        body: Mapping[str, Any],
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
    ) -> "PoolRef":
        meta = body.get("metadata") or {}
        return cls(
            namespace=meta.get("namespace") or "default",
            name=meta["name"],
            uid=meta["uid"],
            generation=meta.get("generation"),
            spec=dict(body.get("spec") or {}),
            status=dict(body.get("status") or {}),
            logger=logger or logging.getLogger("spotpool_operator"),
            do_not_disrupt=parse_do_not_disrupt(
                (meta.get("annotations") or {}).get(DO_NOT_DISRUPT)
            ),
        )

    @property
    def identity(self) -> PoolIdentity:
        return PoolIdentity(namespace=self.namespace, name=self.name, uid=self.uid)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def event_ref(self) -> dict[str, Any]:
        """What an Event's involvedObject needs."""
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {"namespace": self.namespace, "name": self.name, "uid": self.uid},
        }


def operator_class(body: Mapping[str, Any]) -> str:
    """The install class a Spotpool names: its spec.operatorClass, "" when it sets none."""
    return str((body.get("spec") or {}).get("operatorClass") or "")


@dataclass
class PoolState:
    """The operator's memory of one pool (lost on restart: everything here can be rebuilt)."""

    status: SpotpoolStatus
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    requested: int = 0  # up requests made (a sequence number)
    covered: int = 0  # the highest request a finished up started after
    latest: PoolRef | None = None  # the newest snapshot any request saw
    applied: StackConfig | None = None  # what the last successful up applied
    converged_once: bool = False  # an up succeeded in this process: refreshes make sense
    replace_pending: bool = False  # a refresh found reclaims; the replacing up has not run
    reclaimed_at: float | None = None  # monotonic time the pending reclaims were found
    credentials: Credentials | None = None  # the last key pair that worked (for deletion)
    inline_warned: int | None = None  # generation the inline-credentials Warning was posted for
    last_activity: float = field(default_factory=time.monotonic)
    checks: int = 0  # reclaim checks made (every so many is a full refresh)
    gone_slots: set[int] = field(default_factory=set)  # the fleet probe saw these go
    held_slots: set[int] = field(default_factory=set)  # ...and another live instance holds
    placement: Placement | None = None  # the last placement's ranking (status.placement)
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # set when gone_slots grows
    released: bool = False  # its shard went to another replica (pool_book.drop)
    # On-demand fallbacks: since when each slot is on-demand, since when spot stock has been
    # seen selling without a break (the hysteresis of the way back), slots moving back now.
    on_demand_since: dict[int, float] = field(default_factory=dict)
    spot_seen_since: float | None = None
    back_to_spot: set[int] = field(default_factory=set)
    # Termination notices taken in whose replacement has not started: slot -> the notice. The
    # status keeps them too (notices.accepted): the replica that serves the pool next starts them.
    noticed: dict[int, AcceptedNotice] = field(default_factory=dict)
    # status.writer as this replica last wrote or read it: its next status write is made only
    # over that one (status_write.py), so a late write of an earlier shard holder is refused.
    status_writer: dict[str, Any] | None = None
    # onNotice results taken in and not yet in the status (the daemon writes them, with Events)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    # the instances whose onNotice result a status written (or read) holds: answered `recorded`
    written_checkpoints: set[str] = field(default_factory=set)
    # Why a SpotpoolAccessPolicy's limit holds the pool below its desired count ("": it does not)
    limit_note: str = ""
    limits_seen: str = ""  # the namespace's limits when last held at them (limits.fingerprint)
    nodes_looked: float = 0.0  # monotonic time of the last look at its nodes (spec.nodes)
    late_nodes: set[int] = field(default_factory=set)  # slots said NodeNotReady already
    node_renewals: int = 0  # instances replaced in a row for a node not Ready in time
    node_renewed_at: float = 0.0  # monotonic time of the last of those

    def __post_init__(self) -> None:
        self.noticed = self.noticed or {n.slot: n for n in self.status.notices.accepted}
        self.written_checkpoints |= {c.instance_id for c in self.status.notices.checkpoints}

    @property
    def has_news(self) -> bool:
        """Work its daemon does at once: a reclaim the probe saw, a notice, onNotice results."""
        return bool(self.gone_slots or self.noticed or self.checkpoints)
