"""The storm fast path inside the shard's fence, end to end (issue 33, path 1): replica A's
launches wait their turn at the account's RunInstances bucket (a storm) when replica C joins
and takes half the shards. A gives a shard up only once its launches for that shard's pools
are over, and a launch whose turn comes after its shard stopped sends nothing: A never
launches for a pool it no longer serves. Real kube-apiserver, emulator, Pulumi, operators as
processes."""

import re
from functools import partial
from typing import Any

import pytest
from spotpool_operator.replicas.sharding import shard_of

from tests.e2e._support.replicas import Replicas, apply_pools

pytestmark = [pytest.mark.e2e, pytest.mark.heavy]
POOLS, SHARDS = 6, 2
# One RunInstances every 10 s for the account: the storm's launches queue at the bucket for a
# minute, longer than a replica takes to start and join.
LIMITS = {"SPOTPOOL_API_LIMITS": "RunInstances=0.1"}


def _fast_launches(emulator: Any) -> list[dict[str, Any]]:
    calls = emulator.admin_ok("GET", "/_emulator/requests?action=RunInstances")["Requests"]
    return [c for c in calls if (c.get("Params") or {}).get("ClientToken")]


def _given_up(log: str) -> dict[int, int]:
    """Shard -> offset in A's log where A stopped that shard's work to give it to C."""
    return {int(m.group(1)): m.start() for m in re.finditer(r"giving shard (\d+) up", log)}


@pytest.fixture
def replica_options() -> dict[str, Any]:
    return {"shards": SHARDS, "namespace_prefix": "handover-", "env": LIMITS}


def test_a_replica_never_launches_for_a_pool_whose_shard_it_gave_up(replicas: Replicas) -> None:
    emulator = replicas.emulator
    a = replicas.start("a")
    ns = a.namespace()
    names = [f"pool-{i}" for i in range(POOLS)]
    apply_pools(a, ns, names)
    pools = {n: a.wait_ready(ns, n, 1, timeout=300) for n in names}
    while len({shard_of(p["metadata"]["uid"], SHARDS) for p in pools.values()}) < SHARDS:
        name = f"pool-{len(names)}"  # a pool in each shard, whichever C takes
        apply_pools(a, ns, [name])
        names.append(name)
        pools[name] = a.wait_ready(ns, name, 1, timeout=300)
    uids = {n: p["metadata"]["uid"] for n, p in pools.items()}
    victims = [i["instanceId"] for p in pools.values() for i in p["status"]["instances"]]

    # C starts now, its connection to the API server held: it joins the moment it is let
    # through, not a process start later, while all but A's first launches still wait.
    proxy, proxied = replicas.proxy("c")
    proxy.stalled.set()
    c = replicas.start("c", {"KUBECONFIG": str(proxied)}, wait=False)
    emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": victims})
    a.wait_until(
        lambda: a.log.read_text(errors="replace").count("launch_replacements of") >= len(names),
        "A's fast launches under way", 60,
    )  # fmt: skip
    proxy.stalled.clear()
    c.wait_until(c.alive, "C's liveness endpoint", 60)
    c.wait_until(lambda: "-shard-" in c.log.read_text(errors="replace"),
                 "C holding a shard", 60)  # fmt: skip
    gone = set(victims)

    def replaced(name: str) -> bool:  # Ready again, on an instance that is not a victim
        status = a.status(ns, name)
        ids = {i["instanceId"] for i in status.get("instances") or []}
        return status.get("readyReplicas") == 1 and len(ids) == 1 and not ids & gone

    for name in names:  # the storm settles, each pool replaced by its server
        a.wait_until(partial(replaced, name), f"{name} replaced", 300)
    a.wait_until(lambda: _given_up(a.log.read_text(errors="replace")),
                 "A giving a shard up to C", 120)  # fmt: skip
    # Each of A's launches ends with a line of its own: launched, or refused.
    ended = re.compile(r"launched ahead|fast launch of slot")
    a.wait_until(
        lambda: len(ended.findall(a.log.read_text(errors="replace"))) >= len(names),
        "every one of A's fast launches over", 180,
    )  # fmt: skip

    log = a.log.read_text(errors="replace")
    given_up = _given_up(log)
    after = [  # A's launches for a pool of a shard it gave up, ending after that
        line
        for name in names
        if (shard := shard_of(uids[name], SHARDS)) in given_up
        for line in log[given_up[shard] :].splitlines()
        if f"/{name}]" in line and ended.search(line)
    ]
    assert after, "no launch of A still waited when its shard went: nothing was shown"
    late = [line for line in after if "launched ahead of the Pulumi run" in line]
    assert not late, late  # sent after the shard was given up
    for name in names:  # every pool whole, with no second instance for its slot
        status = a.status(ns, name)
        ids = sorted(i["instanceId"] for i in status["instances"])
        assert sorted(a.cloud(uids[name])) == ids and len(ids) == 1, (name, ids)
