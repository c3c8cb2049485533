"""An instance whose node is not Ready within readyTimeoutSeconds is replaced as a failed launch
is (convergence/node_looks.py), on the reconciler with a fake engine and a fake Node API: the
slot gets a new instance with Events that say why, and the replacements in a row are spaced by
the operator's failure backoff, never a loop at the look's pace."""

import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from spotpool_operator.nodes.keeper import NodeKeeper
from spotpool_operator.nodes.kubejson import NodeApi

from tests.operator.fakes import make_world, pool_body, ref, run

pytestmark = pytest.mark.unit


class FakeNodes:
    """The NodeApi calls a look makes: the Nodes registered, Ready ones for `ready` ids."""

    def __init__(self) -> None:
        self.ready: set[str] = set()

    def nodes(self, max_age: float = 0.0) -> list[dict[str, Any]]:
        return [
            {"metadata": {"name": i.lower(), "labels": {"spotpool.io/instance-id": i}},
             "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
            for i in sorted(self.ready)
        ]  # fmt: skip

    def patch_node(self, node: str, patch: dict[str, Any]) -> None:
        pass


def test_a_node_not_ready_in_time_is_replaced_and_backed_off(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    reconciler, api = world.reconciler, FakeNodes()
    reconciler.nodes = NodeKeeper(api, reconciler.events, CollectorRegistry())  # type: ignore[arg-type]
    body = pool_body(nodes={"readyTimeoutSeconds": 30})
    pool_ref = ref(body)
    run(reconciler.converge(pool_ref))
    other_ref = ref(pool_body("other", nodes={"labels": {"pool": "other"}}))  # joins fine
    run(reconciler.converge(other_ref))
    api.ready = {i.instance_id for i in reconciler.pool(other_ref).status.instances}
    pool = reconciler.pool(pool_ref)
    first = {i.slot: i.instance_id for i in pool.status.instances}
    api.ready.add(first[1])  # slot 1 joined; slot 0's join never works

    def look(late_for: float = 31.0) -> None:
        """One look, every waiting instance `late_for` seconds without a Ready node."""
        keeper = reconciler.nodes
        assert keeper is not None
        run(reconciler.look_at_nodes(pool_ref))  # starts the clocks of new instances
        run(reconciler.look_at_nodes(other_ref))  # another pool's look forgets none of them
        waiting = keeper.waiting[(pool_ref.namespace, pool_ref.name)]
        for instance in waiting:
            waiting[instance] = time.monotonic() - late_for
        pool.nodes_looked = reconciler.pool(other_ref).nodes_looked = 0.0
        run(reconciler.look_at_nodes(pool_ref))
        run(reconciler.look_at_nodes(other_ref))
        pool.nodes_looked = reconciler.pool(other_ref).nodes_looked = 0.0

    look(late_for=5.0)
    assert "NodeNotReady" not in world.events.reasons()  # not late yet
    look()
    second = {i.slot: i.instance_id for i in pool.status.instances}
    assert second[1] == first[1] and second[0] != first[0]  # only the late slot
    assert ("replace_slots", pool_ref.identity.stack_name) in world.cloud.calls
    said = [m for _, r, m in world.events.posted if r == "NodeNotReady"]
    assert len(said) == 1 and first[0] in said[0] and "failed launch" in said[0], said
    assert any(r == "Replaced" and second[0] in m for _, r, m in world.events.posted)

    look()  # the new one is late too: held by the backoff (10 s after the first)
    assert {i.slot: i.instance_id for i in pool.status.instances} == second
    held = [m for _, r, m in world.events.posted if r == "NodeNotReady"][-1]
    assert "replaced in" in held and "1 replaced in a row" in held, held
    look()  # said once per slot while it waits
    assert len([r for r in world.events.reasons() if r == "NodeNotReady"]) == 2

    pool.node_renewed_at -= reconciler.settings.backoff(0)  # the backoff has passed
    look()
    third = {i.slot: i.instance_id for i in pool.status.instances}
    assert third[0] not in (first[0], second[0]) and pool.node_renewals == 2

    api.ready |= set(third.values())  # the join works now: the count starts again
    look()
    assert pool.node_renewals == 0
    assert [r["ready"] for r in pool.status.model_dump(by_alias=True)["nodes"]] == [True, True]


def test_one_node_listing_serves_every_pools_look_for_a_while() -> None:
    """NodeApi.nodes(max_age): pools looking within the window share one list call."""

    class Core:
        calls = 0

        def list_node(self, **_: Any) -> Any:
            Core.calls += 1
            return type("Reply", (), {"data": b'{"items": [{"metadata": {"name": "n"}}]}'})()

    now = [100.0]
    api = NodeApi(Core(), clock=lambda: now[0])
    assert api.nodes(2.0) == api.nodes(2.0) == [{"metadata": {"name": "n"}}]
    assert Core.calls == 1
    api.nodes()  # a drain's look: always fresh
    now[0] += 2.5
    api.nodes(2.0)
    assert Core.calls == 3
