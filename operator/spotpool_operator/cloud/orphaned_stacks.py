"""Stacks whose pool is gone, as the sweep of deleted pools' instances meets them: a deleted
pool's instance that a stack of the backend holds while no Spotpool has the pool's namespace and
name again. The stack keeps it for good (the sweep never takes what a stack holds) and no one
converges it: counted in a gauge every pass, and said once each in a Warning Event
`StackOrphaned` on the install's Lease (`spotpool stacks orphaned` lists them)."""

import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any

from spotpool.engine.leftovers.orphans import Tagged
from spotpool.engine.leftovers.stray_rules import Fleet
from spotpool_operator.reporting.events import Events

log = logging.getLogger("spotpool_operator.strays")


class OrphanedStacks:
    def __init__(
        self,
        events: Events,
        install_object: dict[str, Any] | None,
        gauge: Callable[[int], None] = lambda count: None,
    ) -> None:
        self.events, self.install_object, self.gauge = events, install_object, gauge
        self.found: set[str] = set()  # stack names, as of the last pass that read them
        self._told: set[str] = set()

    def pass_over(
        self,
        fleet: Fleet,
        tagged: Mapping[str, list[Tagged]],
        stacks: Collection[str],
        candidates: Mapping[str, str | None],
        pool_names: Callable[[Collection[str]], set[str] | None],
    ) -> None:
        """One pass's deleted pools (`fleet.missing`) whose instances a stack holds."""
        held: dict[str, set[str]] = {}
        for uid in fleet.missing:
            ids = {i.instance_id for i in tagged.get(uid, [])} & (fleet.held or frozenset())
            if ids and candidates.get(uid):
                held.setdefault(str(candidates[uid]), set()).update(ids)
        if held:
            self.observe(held, pool_names(held), stacks)

    def observe(
        self,
        held_pools: Mapping[str, Collection[str]],
        live: Collection[str] | None,
        stacks: Collection[str],
    ) -> None:
        """`held_pools`: "namespace/name" -> the held instances of a deleted pool tagged for
        it; `live`: which of those names a Spotpool has now (None: not known, nothing said);
        `stacks`: the stacks the backend's read found."""
        if live is None:
            return
        self.found = {
            stack
            for pool in held_pools
            if pool not in live and (stack := pool.replace("/", ".", 1)) in stacks
        }
        self.gauge(len(self.found))
        for stack in sorted(self.found - self._told):
            self._told.add(stack)
            ids = ", ".join(sorted(held_pools[stack.replace(".", "/", 1)]))
            what = (
                f"stack {stack} holds instance(s) {ids} of a pool that no longer exists: never "
                "swept, converged by no one; apply the pool again to take it back, or destroy "
                "the stack (`spotpool stacks orphaned`)"
            )
            log.warning("%s", what)
            if self.install_object is not None:
                self.events.post(self.install_object, "Warning", "StackOrphaned", what)
