"""Limits reserved before the launch, in the operator (fake engine and cluster; the ledger with
the API server's resourceVersion check): pools converging at once never pass a limit together;
a raised limit is used at the next refresh with no spec edit; a retained pool's instances stay
reserved until the admin releases them, a destroyed pool's go; a cost or GPU limit prices the
planned launch and holds what it cannot price or count; a surge at the limit is held; a policy
the operator does not understand refuses and holds."""

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from spotpool_operator.basics.failures import PoolProblem
from spotpool_operator.cloud.cost import PriceBook
from spotpool_operator.reporting.kube import KubeCluster, PoolUse
from spotpool_operator.reporting.policy_status import write_once

from spotpool.api import notices
from spotpool.api.access import AccessPolicySpec, NamedPolicy
from spotpool.api.spec import SpotpoolSpec
from spotpool.engine.tencent.credentials import Credentials
from tests.operator.fakes import World, make_world, noticed_world, pool_body, ref, run

pytestmark = pytest.mark.unit
POLICY = "team-a"


def limit(**limits: Any) -> list[NamedPolicy]:
    spec = AccessPolicySpec.model_validate({"namespaces": {"names": ["team-a"]}, "limits": limits})
    return [NamedPolicy(POLICY, spec)]


def reserved(world: World) -> dict[str, int]:
    """Pool name -> instances reserved in the policy's ledger."""
    return {e.pool: e.instances for e in world.cluster.ledgers.get(POLICY, {}).values()}


def limited(world: World, name: str = "gpu") -> str:
    status = world.cluster.last(f"team-a/{name}")
    found = [c for c in status["conditions"] if c["type"] == "Limited"]
    return str(found[0]["message"]) if found else ""


def priced(
    world: World, spot: float, on_demand: float, gpus: dict[str, int],
    spots: dict[str, float] | None = None,
) -> None:  # fmt: skip
    def quotes(
        credentials: Credentials, region: str, zones: list[str], types: list[str]
    ) -> dict[tuple[str, str], tuple[float | None, float | None]]:
        return {(z, t): ((spots or {}).get(t, spot), on_demand) for z in zones for t in types}

    def counted(credentials: Credentials, region: str, types: list[str]) -> dict[str, int]:
        return {t: gpus[t] for t in types if t in gpus}

    world.reconciler.prices = PriceBook(quotes, gpu_lister=counted)


def test_pools_converging_at_once_never_pass_the_limit_together(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.cluster.policies = limit(instances=10)
    world.cluster.conflicts = 3  # another replica writes the ledger first, three times
    bodies = [pool_body(f"p{n}", minimum=4, maximum=4) for n in range(5)]

    async def at_once() -> None:
        await asyncio.gather(*(world.reconciler.converge(ref(b)) for b in bodies))

    run(at_once())
    launched = sorted(c.count for c in world.cloud.configs)
    assert sum(launched) == 10 and launched == [0, 0, 2, 4, 4]  # not 5 x 4
    assert sorted(reserved(world).values()) == [0, 0, 2, 4, 4]
    held = [b["metadata"]["name"] for b in bodies if limited(world, b["metadata"]["name"])]
    assert len(held) == 3


def test_a_ledger_that_keeps_changing_launches_nothing(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.cluster.policies = limit(instances=10)
    world.cluster.conflicts = 1000
    with pytest.raises(PoolProblem, match="could not be reserved before the launch"):
        run(world.reconciler.converge(ref(pool_body())))
    assert world.cloud.configs == []


def test_a_raised_limit_is_used_at_the_next_refresh_with_no_spec_edit(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.cluster.policies = limit(instances=1)
    body = pool_body(minimum=3, maximum=3)
    run(world.reconciler.converge(ref(body)))
    assert [c.count for c in world.cloud.configs] == [1]
    assert "held at 1 of 3 instances" in limited(world)
    assert not run(world.reconciler.limits_moved(ref(body)))
    world.cluster.policies = limit(instances=2)  # the admin raises it
    assert run(world.reconciler.limits_moved(ref(body)))
    run(world.reconciler.grow_held(ref(body)))  # the daemon looks when the limits move
    assert [c.count for c in world.cloud.configs] == [1, 2]
    assert "held at 2 of 3 instances" in limited(world)
    world.cluster.policies = limit(instances=5)
    run(world.reconciler.check_reclaims(ref(body)))  # or at the refresh
    assert [c.count for c in world.cloud.configs] == [1, 2, 3]
    assert limited(world) == "" and reserved(world) == {"gpu": 3}


def test_retained_instances_stay_reserved_until_the_admin_releases_them(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.cluster.policies = limit(instances=2)
    first = pool_body(minimum=2, deletionPolicy="Retain")
    run(world.reconciler.converge(ref(first)))
    run(world.reconciler.delete(ref(first)))
    (entry,) = world.cluster.ledgers[POLICY].values()
    assert entry.retained and entry.instances == 2
    again = pool_body(uid="uid-again", minimum=2, deletionPolicy="Retain")
    run(world.reconciler.converge(ref(again)))
    assert [c.count for c in world.cloud.configs] == [2, 0]  # held: the kept two count
    del world.cluster.ledgers[POLICY]["uid-gpu"]  # the admin releases them
    run(world.reconciler.check_reclaims(ref(again)))
    assert [c.count for c in world.cloud.configs] == [2, 0, 2]
    # Delete: destroyed, its reservation goes
    deleted = pool_body(uid="uid-again", minimum=2, deletionPolicy="Delete")
    run(world.reconciler.delete(ref(deleted)))
    assert reserved(world) == {}


def test_a_cost_limit_prices_the_planned_launch_new_or_primed(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.cluster.policies = limit(hourlyCost=1.2)
    priced(world, spot=0.5, on_demand=2.0, gpus={"GN7.2XLARGE32": 1, "S5.MEDIUM4": 0})
    run(world.reconciler.converge(ref(pool_body("new", minimum=4, maximum=4))))
    assert [c.count for c in world.cloud.configs] == [2]  # 2 x 0.5 of 1.2; it had no cost yet
    assert "limits namespace team-a to 1.2 an hour" in limited(world, "new")
    run(world.reconciler.delete(ref(pool_body("new"))))
    # on demand when it may fall back: 2.0 an hour each, none fits
    fallback = pool_body("fallback", minimum=1, onDemandFallback={"enabled": True})
    run(world.reconciler.converge(ref(fallback)))
    assert world.cloud.configs[-1].count == 0
    run(world.reconciler.delete(ref(fallback)))
    # no price at all: held, and said so
    world.reconciler.prices = None
    run(world.reconciler.converge(ref(pool_body("unpriced", minimum=1))))
    assert world.cloud.configs[-1].count == 0
    assert "cannot be priced: no growth until it does" in limited(world, "unpriced")


def test_a_type_of_unknown_gpu_count_is_held_under_a_gpu_limit(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.cluster.policies = limit(gpus=3)
    priced(world, spot=0.5, on_demand=2.0, gpus={"GN7.5XLARGE80": 2})
    run(world.reconciler.converge(ref(pool_body("a10", instanceType="PNV4.7XLARGE116"))))
    assert world.cloud.configs[-1].count == 0
    assert "the cloud gives no GPU count for PNV4.7XLARGE116" in limited(world, "a10")
    run(world.reconciler.converge(ref(pool_body("t4", instanceType="GN7.5XLARGE80", minimum=3))))
    assert world.cloud.configs[-1].count == 1  # 2 GPUs each, 3 in all


def _report(key: str, slot: int, instance: str) -> tuple[bytes, str]:
    """A termination notice for the slot's instance, two minutes out, signed as its agent signs."""
    when = datetime.now(UTC) + timedelta(minutes=2) + notices.BEIJING
    body = json.dumps({"poolUid": "uid-gpu", "slot": slot, "instanceId": instance,
                       "terminationTime": when.strftime("%Y-%m-%d %H:%M:%S")}).encode()  # fmt: skip
    return body, notices.sign(notices.slot_token(key, slot, ""), int(time.time()), body)


def test_a_notice_surge_at_the_limit_is_held(tmp_path: Path) -> None:
    world, body, first = noticed_world(tmp_path)  # a pool of 2, no limit yet
    world.cluster.policies = limit(instances=2)
    reconciler = world.reconciler
    key = reconciler.settings.engine.notice_key("uid-gpu")
    report, signature = _report(key, 1, first[1])
    assert reconciler.receive_notice(report, signature)[0] == 202
    run(reconciler.start_surges(ref(body)))
    assert ("start_surge", "team-a.gpu") not in world.cloud.calls
    assert "SurgeHeld" in world.events.reasons()
    world.cluster.policies = limit(instances=3)
    report, signature = _report(key, 0, first[0])
    assert reconciler.receive_notice(report, signature)[0] == 202
    run(reconciler.start_surges(ref(body)))
    assert ("start_surge", "team-a.gpu") in world.cloud.calls
    assert reserved(world) == {"gpu": 3}


def test_a_rollouts_surge_is_what_fits_and_waits_when_nothing_may_go(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.cluster.policies = limit(instances=3)
    body = pool_body(minimum=3, disruption={"maxUnavailable": 0, "maxSurge": 2})
    run(world.reconciler.converge(ref(body)))
    reconciler, pool = world.reconciler, world.reconciler.pool(ref(body))
    assert pool.credentials is not None
    spec = SpotpoolSpec.model_validate(body["spec"])
    room = reconciler._surge_room(ref(body), spec, pool.status, pool.credentials, 3)
    with pytest.raises(PoolProblem, match="the rollout waits"):
        room(2)
    world.cluster.policies = limit(instances=4)
    assert room(2) == 1 and reserved(world) == {"gpu": 4}


def test_a_policy_the_operator_does_not_understand_refuses_and_holds(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    spec = AccessPolicySpec.model_validate({"namespaces": {"selector": {}}})
    world.cluster.policies = [NamedPolicy("newer", spec, "spec.grants: Extra inputs")]
    with pytest.raises(PoolProblem, match="does not understand it"):
        run(world.reconciler.converge(ref(pool_body())))
    assert world.cloud.configs == []


def test_a_rollout_to_a_dearer_type_past_the_cost_limit_waits(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.cluster.policies = limit(hourlyCost=1.0)
    priced(world, 0.1, 2.0, {"S5.MEDIUM4": 0, "GN7.2XLARGE32": 1}, {"GN7.2XLARGE32": 0.6})
    body = pool_body(instanceType="S5.MEDIUM4", minimum=2)
    run(world.reconciler.converge(ref(body)))
    assert world.cloud.configs[-1].count == 2  # 0.2 an hour
    pool = world.reconciler.pool(ref(body))
    assert pool.credentials is not None
    dearer = SpotpoolSpec.model_validate({**body["spec"], "instanceType": "GN7.2XLARGE32"})
    room = world.reconciler._surge_room(ref(body), dearer, pool.status, pool.credentials, 2)
    with pytest.raises(PoolProblem, match=r"would cost 1.2 an hour .* past .*'s 1"):
        room(0)  # kept at 2 (it runs 2), but 2 of the dearer type pass the limit


class _Policies:
    """What the policies' status writer reads and writes (reporting/policy_status.py)."""

    def __init__(self, *policies: NamedPolicy) -> None:
        self.policies = list(policies)
        self.patched: dict[str, dict[str, Any]] = {}

    def access_policies(self) -> list[NamedPolicy]:
        return self.policies

    def all_pools(self, namespaces: list[str] | None) -> list[tuple[str, PoolUse]]:
        return []

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        return {}

    def patch_policy_status(self, name: str, status: dict[str, Any]) -> None:
        self.patched[name] = status


def test_a_policy_not_understood_says_so_and_the_status_writer_leaves_the_ledger_alone() -> None:
    spec = AccessPolicySpec.model_validate({"namespaces": {"selector": {}}})
    fake = _Policies(NamedPolicy("newer", spec, "spec.grants: Extra inputs"), limit()[0])
    write_once(cast(KubeCluster, fake), None, {})
    assert fake.patched["newer"]["problem"] == "spec.grants: Extra inputs"
    assert fake.patched[POLICY]["problem"] is None
    assert not {"reserved", "reservations"} & set(fake.patched[POLICY])  # a merge patch: kept
