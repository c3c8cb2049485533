"""The reconciler with a fake engine: coalescing, bounded concurrency, reclaims, failures."""

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spotpool_operator.basics.failures import PoolProblem

from spotpool.engine.launches.fast_launch import FastLaunch
from tests.operator.fakes import FakeEngine, World, make_world, pool_body, ref, run

pytestmark = pytest.mark.unit


async def until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Let the loop run until `condition()` holds; a failure after `timeout` seconds."""

    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), timeout)


def test_create_runs_up_and_writes_status(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    run(world.reconciler.converge(ref(pool_body())))

    assert world.cloud.calls == [("up", "team-a.gpu")]
    assert world.cloud.credentials == ["AKIDfromsecret"]  # from the Secret
    writes = world.cluster.statuses["team-a/gpu"]
    assert writes[0]["phase"] == "Converging"  # before the operation...
    final = writes[-1]  # ...and after it
    assert final["size"] == 2 and final["readyReplicas"] == 2 and final["phase"] == "Ready"
    assert final["observedGeneration"] == 1
    assert "Converged" in world.events.reasons()


def test_the_same_spec_twice_is_one_up(tmp_path: Path) -> None:
    world = make_world(tmp_path)

    async def scenario() -> None:
        await world.reconciler.converge(ref(pool_body()))  # create
        await world.reconciler.converge(ref(pool_body()))  # resume of the same spec

    run(scenario())
    assert world.cloud.calls == [("up", "team-a.gpu")]


def test_spec_changes_during_an_up_coalesce_into_one_follow_up(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    gate = world.cloud.gate = threading.Event()

    async def scenario() -> None:
        first = asyncio.create_task(world.reconciler.converge(ref(pool_body(replicas=2))))
        await asyncio.to_thread(world.cloud.entered.acquire)  # the first up is running
        later = [
            asyncio.create_task(world.reconciler.converge(ref(pool_body(generation=g, replicas=g))))
            for g in (3, 4, 5)
        ]
        pool = world.reconciler.pool(ref(pool_body()))
        await until(lambda: pool.requested == 4)  # every request counted while the up runs
        gate.set()
        await asyncio.gather(first, *later)

    run(scenario())
    assert [c.count for c in world.cloud.configs] == [2, 5]  # the newest spec, once
    assert world.cluster.last("team-a/gpu")["observedGeneration"] == 5


def test_operations_across_pools_are_bounded(tmp_path: Path) -> None:
    world = make_world(tmp_path, max_concurrent=2)
    gate = world.cloud.gate = threading.Event()

    async def scenario() -> None:
        tasks = [
            asyncio.create_task(world.reconciler.converge(ref(pool_body(name=f"p{i}"))))
            for i in range(5)
        ]
        for _ in range(2):
            await asyncio.to_thread(world.cloud.entered.acquire)
        gauges = world.metrics.registry.get_sample_value
        await until(lambda: gauges("spotpool_operations_queued") == 3)  # counted as they queue
        assert world.cloud.running == 2  # the other three wait for a slot
        assert gauges("spotpool_operations_in_flight") == 2
        assert gauges("spotpool_operations_queued") == 3
        gate.set()
        await asyncio.gather(*tasks)

    run(scenario())
    assert world.cloud.most_running == 2
    assert len(world.cloud.calls) == 5
    assert world.metrics.registry.get_sample_value("spotpool_operations_queued") == 0


def _converged(world: World, **spec: Any) -> None:
    run(world.reconciler.converge(ref(pool_body(**spec))))


def test_reclaim_is_announced_replaced_and_counted(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    _converged(world, replicas=3)
    gone = world.cloud.reclaim("team-a.gpu", 1)

    run(world.reconciler.check_reclaims(ref(pool_body(replicas=3))))

    assert world.cloud.calls[-2:] == [("refresh", "team-a.gpu"), ("up", "team-a.gpu")]
    reclaimed = [m for _, r, m in world.events.posted if r == "Reclaimed"]
    replaced = [m for _, r, m in world.events.posted if r == "Replaced"]
    assert reclaimed and f"slot 1 ({gone})" in reclaimed[0]
    assert replaced and "slot 1 now ins-" in replaced[0]
    writes = world.cluster.statuses["team-a/gpu"]
    assert any(w["reclaims"]["total"] == 1 and w["size"] == 2 for w in writes)
    final = writes[-1]
    assert final["size"] == 3 and final["reclaims"]["total"] == 1
    assert gone not in {i["instanceId"] for i in final["instances"]}
    where = {"zone": "ap-guangzhou-3", "instance_type": "GN7.2XLARGE32"}
    counted = world.metrics.registry.get_sample_value(
        "spotpool_reclaims_total", {"namespace": "team-a", "pool": "gpu", **where}
    )
    assert counted == 1


def test_a_quiet_refresh_writes_nothing(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    _converged(world)
    writes = len(world.cluster.statuses["team-a/gpu"])
    run(world.reconciler.check_reclaims(ref(pool_body())))
    assert world.cloud.calls[-1] == ("refresh", "team-a.gpu")
    assert len(world.cluster.statuses["team-a/gpu"]) == writes


def test_no_refresh_before_the_first_up(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    run(world.reconciler.check_reclaims(ref(pool_body())))
    assert world.cloud.calls == []


def test_paused_pool_is_left_alone(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    _converged(world)
    run(world.reconciler.converge(ref(pool_body(generation=2, replicas=4, paused=True))))
    run(world.reconciler.check_reclaims(ref(pool_body(generation=2, paused=True))))
    assert world.cloud.calls == [("up", "team-a.gpu")]
    assert world.cluster.last("team-a/gpu")["phase"] == "Paused"
    for _ in range(2):  # the finalizer's retries
        with pytest.raises(PoolProblem) as raised:
            run(world.reconciler.delete(ref(pool_body(generation=2, paused=True))))
        assert raised.value.reason == "DeletionPaused"
    # The deletion's wait is said where a person looks: the condition and one Event.
    status = world.cluster.last("team-a/gpu")
    progressing = next(c for c in status["conditions"] if c["type"] == "Progressing")
    assert progressing["reason"] == "DeletionPaused"
    assert "deletion waits" in progressing["message"]
    said = [m for _, r, m in world.events.posted if r == "DeletionPaused"]
    assert len(said) == 1 and "set paused to false" in said[0]
    assert world.cloud.calls == [("up", "team-a.gpu")]


def test_missing_secret_is_a_condition_and_an_event_not_an_up(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    body = pool_body(credentialsSecretRef={"name": "nope"})
    with pytest.raises(PoolProblem) as raised:
        run(world.reconciler.converge(ref(body)))
    assert raised.value.reason == "SecretNotFound" and not raised.value.permanent
    assert world.cloud.calls == []
    status = world.cluster.last("team-a/gpu")
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "SecretNotFound"
    assert (
        "team-a/nope (credentialsSecretRef) is not found or does not opt in"
        in (degraded["message"])
    )
    assert ("Warning", "SecretNotFound") in [(t, r) for t, r, _ in world.events.posted]


def test_secret_without_the_keys(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.cluster.secrets[("team-a", "half")] = {"secretId": b"AKID"}
    with pytest.raises(PoolProblem) as raised:
        run(world.reconciler.converge(ref(pool_body(credentialsSecretRef={"name": "half"}))))
    assert raised.value.reason == "SecretKeyMissing" and "secretKey" in raised.value.message


def test_inline_keys_work_with_a_warning(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    body = pool_body(secretId="AKIDinline", secretKey="inline-key")
    del body["spec"]["credentialsSecretRef"]
    run(world.reconciler.converge(ref(body)))
    assert world.cloud.credentials == ["AKIDinline"]
    assert world.events.posted[0][:2] == ("Warning", "InlineCredentials")
    conditions = {c["type"]: c for c in world.cluster.last("team-a/gpu")["conditions"]}
    assert conditions["InlineCredentials"]["status"] == "True"
    assert conditions["Ready"]["status"] == "True"
    for _, _, message in world.events.posted:
        assert "inline-key" not in message


def test_capacity_failure_is_reported_and_other_pools_go_on(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.cloud.fail_up = "Code=ResourceInsufficient.SpecifiedInstanceType, Message=no stock"
    with pytest.raises(PoolProblem) as raised:
        run(world.reconciler.converge(ref(pool_body(name="starved"))))
    assert raised.value.reason == "ResourceInsufficient"
    status = world.cluster.last("team-a/starved")
    assert status["phase"] == "Degraded"
    world.cloud.fail_up = None
    run(world.reconciler.converge(ref(pool_body(name="fine"))))
    assert world.cluster.last("team-a/fine")["phase"] == "Ready"
    assert world.metrics.operations.labels("up", "failed")._value.get() == 1
    assert world.metrics.operations.labels("up", "succeeded")._value.get() == 1
    failures = {"kind": "up", "reason": "ResourceInsufficient"}
    assert world.metrics.registry.get_sample_value("spotpool_failures_total", failures) == 1


def test_invalid_spec_is_permanent(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    with pytest.raises(PoolProblem) as raised:
        run(world.reconciler.converge(ref(pool_body(minimum=4, maximum=2))))
    assert raised.value.permanent and raised.value.reason == "InvalidSpec"
    assert "minimum must be less than or equal to maximum" in raised.value.message


def test_delete_destroys_and_retain_forgets(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    _converged(world)
    run(world.reconciler.delete(ref(pool_body())))
    assert world.cloud.calls[-1] == ("destroy", "team-a.gpu")
    assert "Destroyed" in world.events.reasons()

    _converged(world, deletionPolicy="Retain")
    run(world.reconciler.delete(ref(pool_body(deletionPolicy="Retain"))))
    assert world.cloud.calls[-1] == ("forget", "team-a.gpu")
    retained = [m for _, r, m in world.events.posted if r == "Retained"]
    assert retained and "2 instance(s) kept" in retained[0]
    assert world.reconciler.pools == {}


def test_delete_without_credentials_uses_the_last_that_worked(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    _converged(world)
    del world.cluster.secrets[("team-a", "tencentcloud")]  # namespace teardown took it first
    run(world.reconciler.delete(ref(pool_body())))
    assert world.cloud.calls[-1] == ("destroy", "team-a.gpu")
    assert world.cloud.credentials[-1] == "AKIDfromsecret"


def test_after_a_restart_an_empty_pool_without_its_secret_is_deleted(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    _converged(world, replicas=0, minimum=0)
    after = _restarted(world, tmp_path)  # the keys that worked are no longer in memory
    del after.cluster.secrets[("team-a", "tencentcloud")]
    run(after.reconciler.delete(ref(pool_body(replicas=0, minimum=0))))
    assert after.cloud.calls[-1] == ("forget", "team-a.gpu")  # no cloud call without keys
    assert "Destroyed" in after.events.reasons() and after.reconciler.pools == {}


def test_after_a_restart_a_pool_with_instances_and_no_secret_waits_and_says_why(
    tmp_path: Path,
) -> None:
    world = make_world(tmp_path)
    _converged(world)
    after = _restarted(world, tmp_path)
    del after.cluster.secrets[("team-a", "tencentcloud")]
    with pytest.raises(PoolProblem) as raised:
        run(after.reconciler.delete(ref(pool_body())))
    assert raised.value.reason == "SecretNotFound"
    assert "team-a/tencentcloud" in raised.value.message
    assert "deletionPolicy to Retain" in raised.value.message
    assert ("destroy", "team-a.gpu") not in after.cloud.calls
    degraded = next(
        c for c in after.cluster.last("team-a/gpu")["conditions"] if c["type"] == "Degraded"
    )
    assert degraded["reason"] == "SecretNotFound"
    assert ("Warning", "SecretNotFound") in [(t, r) for t, r, _ in after.events.posted]
    # The escape hatch: Retain forgets the stack without keys and keeps the instances.
    run(after.reconciler.delete(ref(pool_body(deletionPolicy="Retain"))))
    assert after.cloud.calls[-1] == ("forget", "team-a.gpu")


def test_refresh_interval_from_spec_else_the_default(tmp_path: Path) -> None:
    world = make_world(tmp_path, refresh_interval=42)
    assert world.reconciler.refresh_interval(ref(pool_body(refreshInterval="1m30s"))) == 90
    assert world.reconciler.refresh_interval(ref(pool_body())) == 42
    assert world.reconciler.refresh_interval(ref(pool_body(refreshInterval="60s"))) == 60


def test_quick_check_skips_the_refresh_while_every_instance_is_alive(tmp_path: Path) -> None:
    world = make_world(tmp_path, quick_check=True, full_refresh_every=3)
    _converged(world)
    run(world.reconciler.check_reclaims(ref(pool_body())))
    assert world.cloud.calls[-1] == ("describe", "team-a.gpu")  # no Pulumi refresh
    run(world.reconciler.check_reclaims(ref(pool_body())))
    run(world.reconciler.check_reclaims(ref(pool_body())))  # the 3rd: a full refresh
    assert world.cloud.calls[-1] == ("refresh", "team-a.gpu")

    world.cloud.reclaim("team-a.gpu", 0)
    run(world.reconciler.check_reclaims(ref(pool_body())))
    assert world.cloud.calls[-3:] == [
        ("describe", "team-a.gpu"),
        ("refresh", "team-a.gpu"),
        ("up", "team-a.gpu"),
    ]
    assert "Replaced" in world.events.reasons()


def test_after_a_failed_up_the_old_spec_is_applied_again(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    _converged(world, replicas=2)
    world.cloud.fail_up = "Code=ResourceInsufficient.SpecifiedInstanceType"
    with pytest.raises(PoolProblem):
        _converged(world, generation=2, replicas=4)
    world.cloud.fail_up = None
    _converged(world, generation=3, replicas=2)  # back to what once worked: still an up
    assert [c.count for c in world.cloud.configs] == [2, 4, 2]


def _restarted(world: World, tmp_path: Path) -> World:
    """A new operator process (empty memory) over the same cloud, stacks and cluster."""
    fresh = make_world(tmp_path)
    fresh.cloud.stacks, fresh.cloud.applied = world.cloud.stacks, world.cloud.applied
    fresh.cluster.statuses = world.cluster.statuses
    return fresh


def _body_with_status(world: World, **spec: Any) -> dict[str, Any]:
    body = pool_body(**spec)
    body["status"] = world.cluster.last("team-a/gpu")
    return body


def test_a_restart_over_an_applied_pool_runs_no_up(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    run(world.reconciler.converge(ref(pool_body())))
    after = _restarted(world, tmp_path)
    run(after.reconciler.converge(ref(_body_with_status(world))))  # kopf's resume
    assert after.cloud.calls == [("applied_config", "team-a.gpu")]  # read, no up
    pool = after.reconciler.pool(ref(pool_body()))
    assert pool.converged_once and pool.applied is not None  # reclaim checks start at once


def test_a_restart_over_a_changed_spec_runs_the_up(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    run(world.reconciler.converge(ref(pool_body())))
    after = _restarted(world, tmp_path)
    run(after.reconciler.converge(ref(_body_with_status(world, replicas=3))))
    assert ("up", "team-a.gpu") in after.cloud.calls


def test_unpause_with_nothing_to_change_is_ready_at_the_new_generation(tmp_path: Path) -> None:
    world = make_world(tmp_path)

    async def scenario() -> None:
        await world.reconciler.converge(ref(pool_body()))
        await world.reconciler.converge(ref(pool_body(generation=2, paused=True)))
        assert world.cluster.last("team-a/gpu")["phase"] == "Paused"
        await world.reconciler.converge(ref(pool_body(generation=3, paused=False)))

    run(scenario())
    last = world.cluster.last("team-a/gpu")
    assert last["phase"] == "Ready" and last["observedGeneration"] == 3
    ready = next(c for c in last["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["observedGeneration"] == 3
    assert world.cloud.calls == [("up", "team-a.gpu")]


@pytest.mark.parametrize("change", [{"deletionPolicy": "Retain"}, {"refreshInterval": "5m"}])
def test_a_spec_change_without_engine_work_reaches_observed_generation(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    world = make_world(tmp_path)

    async def scenario() -> None:
        await world.reconciler.converge(ref(pool_body()))
        await world.reconciler.converge(ref(pool_body(generation=2, **change)))

    run(scenario())
    assert world.cluster.last("team-a/gpu")["observedGeneration"] == 2
    assert world.cloud.calls == [("up", "team-a.gpu")]


def test_slots_the_probe_saw_go_are_replaced_in_one_targeted_run(tmp_path: Path) -> None:
    world = make_world(tmp_path)

    async def scenario() -> None:
        await world.reconciler.converge(ref(pool_body(replicas=3)))
        pool = world.reconciler.pool(ref(pool_body()))
        world.cloud.reclaim("team-a.gpu", 1)
        pool.gone_slots = {1}
        await world.reconciler.replace_gone(ref(pool_body(replicas=3)))

    run(scenario())
    assert world.cloud.calls[1:] == [("replace_slots", "team-a.gpu"), ("up", "team-a.gpu")]
    last = world.cluster.last("team-a/gpu")
    assert last["reclaims"]["total"] == 1 and last["readyReplicas"] == 3
    assert world.events.reasons().count("Reclaimed") == 1
    assert "Replaced" in world.events.reasons()


def test_a_throttled_quick_check_backs_off_instead_of_a_full_refresh(tmp_path: Path) -> None:
    world = make_world(tmp_path, quick_check=True)
    _converged(world)
    world.cloud.throttled = True
    with pytest.raises(PoolProblem) as raised:
        run(world.reconciler.check_reclaims(ref(pool_body())))
    assert raised.value.reason == "Throttled"
    assert world.cloud.calls[-1] == ("describe", "team-a.gpu")  # no refresh was run
    assert ("refresh", "team-a.gpu") not in world.cloud.calls


def test_a_restart_over_a_pool_left_short_refreshes_in_its_up(tmp_path: Path) -> None:
    """Killed in the middle of replacing a reclaimed slot: the status lists fewer instances
    than it should. The restart does not take the pool as applied: its up refreshes first."""
    world = make_world(tmp_path)
    run(world.reconciler.converge(ref(pool_body())))
    world.cloud.reclaim("team-a.gpu", 0)
    body = _body_with_status(world)
    body["status"]["instances"] = body["status"]["instances"][1:]  # the reclaimed one dropped
    after = _restarted(world, tmp_path)
    after.cloud.reclaimed = world.cloud.reclaimed
    run(after.reconciler.converge(ref(body)))
    assert ("up+refresh", "team-a.gpu") in after.cloud.calls
    assert after.cluster.last("team-a/gpu")["readyReplicas"] == 2


def test_a_gone_slot_held_by_a_live_instance_is_not_launched_ahead(tmp_path: Path) -> None:
    """The probe told slots 1 and 2 gone, slot 2 held by a live instance of the pool the stale
    status does not list (a run cut short): only slot 1 is launched ahead of the Pulumi run,
    which settles slot 2 (a second instance for it would run on unadopted)."""
    world = make_world(tmp_path)
    launched: list[list[int]] = []

    class Recording(FakeEngine):
        def launch_replacements(
            self, config: Any, slots: list[int], login_password: str | None = None
        ) -> FastLaunch:
            launched.append(list(slots))
            return FastLaunch()

    world.reconciler.engine_factory = lambda pool, creds, region, progress: Recording(
        world.cloud, pool, creds
    )

    async def scenario() -> None:
        await world.reconciler.converge(ref(pool_body(replicas=3)))
        pool = world.reconciler.pool(ref(pool_body()))
        world.cloud.reclaim("team-a.gpu", 1)
        world.cloud.reclaim("team-a.gpu", 2)
        pool.gone_slots, pool.held_slots = {1, 2}, {2}
        await world.reconciler.replace_gone(ref(pool_body(replicas=3)))
        assert pool.held_slots == set()  # told once

    run(scenario())
    assert launched == [[1]]
    last = world.cluster.last("team-a/gpu")
    assert last["readyReplicas"] == 3
    assert last["reclaims"]["total"] == 1  # slot 2 was not the cloud's doing
    reclaimed = [m for _, reason, m in world.events.posted if reason == "Reclaimed"]
    assert len(reclaimed) == 1 and "slot 1 (" in reclaimed[0] and "slot 2" not in reclaimed[0]
