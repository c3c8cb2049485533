"""The operator end to end: a real kube-apiserver, the emulator as the cloud, the real Pulumi
engine, and `spotpool operator run` as a process of its own."""

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from spotpool.localworld.kube import Kube
from spotpool.localworld.operator import PASSPHRASE
from tests.e2e._support.operator_runs import (
    killed_mid_up_and_replaced_under_another_hostname,
    tagged_instance,
)
from tests.e2e._support.proc_scan import ProcScan
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld, article_manifest, pool_manifest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    with operator_world(kube, tmp_path_factory.mktemp("operator")) as world:
        yield world


def _instance_ids(status: dict[str, object]) -> list[str]:
    return [str(i["instanceId"]) for i in status.get("instances") or []]  # type: ignore[attr-defined]


def test_the_articles_manifest_converges_with_its_status_filled(world: OperatorWorld) -> None:
    ns = world.namespace()
    world.apply(ns, article_manifest())

    pool = world.wait_ready(ns, "spotpool-sample", 2)

    status = pool["status"]
    uid = pool["metadata"]["uid"]
    assert status["size"] == 2 and status["replicas"] == 2 and status["readyReplicas"] == 2
    assert sorted(_instance_ids(status)) == sorted(world.cloud(uid))
    assert set(world.cloud(uid).values()) == {"RUNNING"}
    for instance in status["instances"]:
        assert instance["instanceId"].startswith("ins-")
        assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", instance["publicIp"])
        assert instance["zone"] == "ap-singapore-2"
        assert instance["instanceType"] == "GN7.2XLARGE32"
    assert status["stack"]["name"] == f"{ns}.spotpool-sample"
    assert status["stack"]["backend"].startswith("file://")
    assert status["stack"]["lastOperation"]["result"] == "succeeded"
    assert status["observedGeneration"] == pool["metadata"]["generation"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "True"
    assert conditions["Progressing"]["status"] == "False"
    assert conditions["Degraded"]["status"] == "False"
    assert conditions["InlineCredentials"]["status"] == "True"  # the article's inline keys
    events = world.events(ns, "spotpool-sample")
    assert ("Warning", "InlineCredentials") in [(t, r) for t, r, _ in events]
    for _, _, message in events:
        assert "xxx" not in message and world.emulator.secret_key not in message

    table = world.kube.ok("-n", ns, "get", "spotpools")
    assert re.search(r"spotpool-sample\s+2\s+2\s+Ready", table), table
    metrics = world.metrics()
    assert re.search(r'spotpool_operations_total\{kind="up",result="succeeded"\} [1-9]', metrics)
    assert f'spotpool_pool_ready_instances{{namespace="{ns}",pool="spotpool-sample"}} 2.0' in (
        metrics
    )
    assert world.emulator.secret_key not in world.log.read_text(errors="replace")


def test_a_reclaim_is_found_and_replaced(world: OperatorWorld) -> None:
    ns = world.namespace()
    world.apply(ns, pool_manifest("reclaimed", replicas=2, refreshInterval="10s"))
    pool = world.wait_ready(ns, "reclaimed", 2)
    uid = pool["metadata"]["uid"]
    victim, survivor = _instance_ids(pool["status"])

    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [victim]})

    def replaced() -> dict[str, object] | None:
        status = world.status(ns, "reclaimed")
        ids = _instance_ids(status)
        done = victim not in ids and len(ids) == 2 and status.get("readyReplicas") == 2
        return status if done else None

    status = world.wait_until(replaced, "the reclaimed instance's replacement", timeout=180)
    assert survivor in _instance_ids(status)
    assert status["reclaims"]["total"] == 1 and status["reclaims"]["lastTime"]
    assert sorted(world.cloud(uid)) == sorted(_instance_ids(status))
    events = world.events(ns, "reclaimed")
    reclaimed = [m for _, r, m in events if r == "Reclaimed"]
    assert reclaimed and victim in reclaimed[0]
    # Posted once the up is over, after the status that shows it: waited for, not assumed.
    world.wait_until(lambda: "Replaced" in world.reasons(ns, "reclaimed"), "Replaced", 60)
    reclaims = r'spotpool_reclaims_total\{[^}]*pool="reclaimed",zone="ap-singapore-2"[^}]*\} 1\.0'
    assert re.search(reclaims, world.metrics())


def test_no_secret_in_any_childs_cmdline_or_environment_during_a_storm(
    world: OperatorWorld,
) -> None:
    """Issue 41: while the operator creates a pool and replaces a storm of reclaims, no Pulumi
    CLI or provider plugin under it holds the cloud keys, the passphrase or the operator's own
    environment's secrets, in its command line or its environment: the runs sign with
    placeholder keys the local API proxy replaces, and read the passphrase from its file."""
    assert world.process is not None
    secrets = {"cloud SecretKey": world.emulator.secret_key, "passphrase": PASSPHRASE,
               "cloud SecretId": world.emulator.secret_id}  # fmt: skip
    ns = world.namespace()
    with ProcScan(world.process.pid, secrets) as scan:
        world.apply(ns, pool_manifest("leakless", replicas=3, refreshInterval="10s"))
        pool = world.wait_ready(ns, "leakless", 3)
        victims = _instance_ids(pool["status"])[:2]
        world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": victims})

        def replaced() -> bool:
            status = world.status(ns, "leakless")
            ids = _instance_ids(status)
            return not set(victims) & set(ids) and status.get("readyReplicas") == 3

        world.wait_until(replaced, "the reclaimed instances' replacements", timeout=180)
    names = set(scan.processes.values())
    assert "pulumi" in names and any("tencentcloud" in n for n in names), names
    assert scan.found == []
    provider = next(e for n, e in scan.environs.items() if "tencentcloud" in n)
    assert provider["TENCENTCLOUD_SECRET_ID"].startswith("SPOTPOOLRUN")  # a run's placeholder
    assert "PULUMI_CONFIG_PASSPHRASE" not in provider


def test_scale_and_spec_changes_converge(world: OperatorWorld) -> None:
    ns = world.namespace()
    world.apply(ns, pool_manifest("scaled", minimum=1, maximum=5, replicas=2))
    pool = world.wait_ready(ns, "scaled", 2)
    uid = pool["metadata"]["uid"]
    first = _instance_ids(pool["status"])

    world.kube.ok("-n", ns, "scale", "spotpool/scaled", "--replicas=3")
    pool = world.wait_ready(ns, "scaled", 3)
    assert _instance_ids(pool["status"])[:2] == first  # scaling keeps the lowest slots
    assert len(world.cloud(uid)) == 3
    scale = world.kube.ok("-n", ns, "get", "spotpool/scaled", "--subresource=scale", "-o", "json")
    assert '"replicas": 3' in scale

    # minimum/maximum without replicas: the pool follows minimum
    world.kube.ok(
        "-n", ns, "patch", "spotpool/scaled", "--type=merge",
        "-p", '{"spec": {"replicas": null, "minimum": 1, "maximum": 1}}',
    )  # fmt: skip
    pool = world.wait_ready(ns, "scaled", 1)
    assert _instance_ids(pool["status"]) == first[:1]
    world.wait_until(lambda: len(world.cloud(uid)) == 1, "the cloud to shrink to 1")

    world.kube.ok(
        "-n", ns, "patch", "spotpool/scaled", "--type=merge",
        "-p", '{"spec": {"instanceType": "GN7.5XLARGE80"}}',
    )  # fmt: skip

    def retyped() -> bool:
        status = world.status(ns, "scaled")
        instances = status.get("instances") or []
        return bool(
            status.get("phase") == "Ready"
            and len(instances) == 1
            and instances[0]["instanceType"] == "GN7.5XLARGE80"
        )

    world.wait_until(retyped, "the instance type change", timeout=240)
    assert len(world.cloud(uid)) == 1


def test_delete_removes_every_instance_and_retain_keeps_them(world: OperatorWorld) -> None:
    ns = world.namespace()
    world.apply(ns, pool_manifest("doomed", replicas=2))
    world.apply(ns, pool_manifest("kept", replicas=2, deletionPolicy="Retain"))
    doomed = world.wait_ready(ns, "doomed", 2)["metadata"]["uid"]
    kept_pool = world.wait_ready(ns, "kept", 2)
    kept = kept_pool["metadata"]["uid"]

    world.kube.ok("-n", ns, "delete", "spotpool", "doomed", "kept", "--wait=false")
    world.wait_until(lambda: world.get(ns, "doomed") is None, "doomed to be deleted")
    world.wait_until(lambda: world.get(ns, "kept") is None, "kept to be deleted")

    assert world.cloud(doomed) == {}
    assert sorted(world.cloud(kept)) == sorted(_instance_ids(kept_pool["status"]))
    assert set(world.cloud(kept).values()) == {"RUNNING"}
    stacks = Path(world.directory / "backend" / ".pulumi" / "stacks")
    assert not list(stacks.glob(f"**/{ns}.doomed.json"))
    assert not list(stacks.glob(f"**/{ns}.kept.json"))
    reasons = world.reasons(ns, "doomed") + world.reasons(ns, "kept")
    assert "Destroyed" in reasons and "Retained" in reasons


def test_one_pool_without_capacity_fails_alone(world: OperatorWorld) -> None:
    ns = world.namespace()
    world.emulator.admin_ok(
        "POST",
        "/_emulator/capacity",
        {"Zone": "ap-singapore-3", "InstanceType": "GN7.10XLARGE160", "Available": 0},
    )
    world.apply(
        ns,
        pool_manifest("starved", availabilityZone="ap-singapore-3", instanceType="GN7.10XLARGE160"),
    )
    world.apply(ns, pool_manifest("first", replicas=1))
    world.apply(ns, pool_manifest("second", replicas=2))

    world.wait_ready(ns, "first", 1)
    world.wait_ready(ns, "second", 2)

    def degraded() -> dict[str, object] | None:
        condition = world.condition(ns, "starved", "Degraded")
        return condition if condition.get("status") == "True" else None

    condition = world.wait_until(degraded, "starved to say it is degraded")
    assert condition["reason"] == "ResourceInsufficient", condition
    assert "no spot stock" in str(condition["message"])
    assert world.status(ns, "starved")["phase"] == "Degraded"
    assert world.condition(ns, "starved", "Ready")["status"] == "False"
    assert ("Warning", "ResourceInsufficient") in [
        (t, r) for t, r, _ in world.events(ns, "starved")
    ]


def test_invalid_manifests_are_refused_with_a_clear_message(world: OperatorWorld) -> None:
    ns = world.namespace()
    manifest = pool_manifest("backwards", minimum=3, maximum=1)
    import json

    result = world.kube.run("-n", ns, "apply", "-f", "-", stdin=json.dumps(manifest))
    assert result.returncode != 0
    assert "minimum must be less than or equal to maximum" in result.stderr


def test_sigkill_during_an_up_then_restart_converges_without_orphans(
    world: OperatorWorld,
) -> None:
    ns = world.namespace()
    world.apply(ns, pool_manifest("survivor", minimum=1, maximum=6, replicas=4))
    uid = world.wait_until(
        lambda: (world.get(ns, "survivor") or {}).get("metadata", {}).get("uid"), "the uid"
    )
    world.wait_until(lambda: world.cloud(uid), "the first instance of the up", timeout=120)
    world.kill()  # SIGKILL to the operator's process group: pulumi and the plugin die too
    made_before_the_kill = set(world.cloud(uid))

    world.start()
    pool = world.wait_ready(ns, "survivor", 4, timeout=300)

    ids = sorted(_instance_ids(pool["status"]))
    assert len(set(ids)) == 4
    assert sorted(world.cloud(uid)) == ids  # no orphan, no duplicate
    assert made_before_the_kill <= set(ids), "an instance the killed up made was wasted"
    world.wait_until(
        lambda: "Recovered" in world.reasons(ns, "survivor"), "the Recovered event", timeout=30
    )
    locks = world.directory / "backend" / ".pulumi" / "locks"
    assert not list(locks.glob(f"**/{ns}.survivor/*.json"))


def test_killed_mid_up_and_replaced_under_another_hostname_converges(
    world: OperatorWorld,
) -> None:
    """A pod replaced mid-`up` (rollout, eviction, OOM): the whole tree dies at once and the
    next operator runs under another name. Its Lease proves the old lock's owner gone."""
    killed_mid_up_and_replaced_under_another_hostname(world)


def test_a_lock_of_another_owner_is_reported_and_never_broken(world: OperatorWorld) -> None:
    ns = world.namespace()
    world.apply(ns, pool_manifest("held", replicas=1))
    world.wait_ready(ns, "held", 1)
    locks = world.directory / "backend" / ".pulumi" / "locks" / "organization" / "spotpool"
    lock = locks / f"{ns}.held" / "b1d3e1a0-0000-4000-8000-000000000000.json"
    lock.parent.mkdir(parents=True, exist_ok=True)
    taken = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    lock.write_text(json.dumps({"pid": 1, "username": "alice", "hostname": "laptop",
                                "timestamp": taken}))  # fmt: skip
    world.apply(ns, pool_manifest("held", replicas=2))  # an up is due now

    def locked() -> dict[str, object] | None:
        degraded = world.condition(ns, "held", "Degraded")
        return degraded if degraded.get("reason") == "StackLocked" else None

    degraded = world.wait_until(locked, "condition StackLocked", timeout=120)
    assert "alice@laptop" in str(degraded["message"])
    assert "StackLocked" in world.reasons(ns, "held")
    assert lock.exists()  # never broken
    lock.unlink()  # its owner is done: the pool goes on by itself
    world.wait_ready(ns, "held", 2, timeout=240)


def test_unpause_is_ready_at_the_new_generation(world: OperatorWorld) -> None:
    ns = world.namespace()
    world.apply(ns, pool_manifest("nap", replicas=1))
    world.wait_ready(ns, "nap", 1)
    world.apply(ns, pool_manifest("nap", replicas=1, paused=True))
    world.wait_until(lambda: world.status(ns, "nap").get("phase") == "Paused", "Paused", 60)
    world.apply(ns, pool_manifest("nap", replicas=1, paused=False))
    pool = world.wait_ready(ns, "nap", 1, timeout=60)  # Ready at the newest generation
    assert pool["status"]["observedGeneration"] == pool["metadata"]["generation"] == 3


def test_after_a_restart_deletion_without_the_secret_ends_or_says_why(
    world: OperatorWorld,
) -> None:
    """The namespace's Secret goes first (as in a namespace teardown) and the operator restarts
    (the keys that worked are no longer in memory): an empty pool still finalizes; one with
    instances waits, names the Secret and the way out, and takes it (deletionPolicy Retain)."""
    ns = world.namespace()
    world.apply(ns, pool_manifest("empty", minimum=0, replicas=0))
    world.apply(ns, pool_manifest("full", replicas=1))
    world.wait_ready(ns, "empty", 0)
    full = world.wait_ready(ns, "full", 1)
    kept = _instance_ids(full["status"])
    world.stop()
    world.kube.ok("-n", ns, "delete", "secret", "tencentcloud")
    world.start()

    def since_restart() -> str:
        text = world.log.read_text(errors="replace")
        return text[text.rindex("=== operator start") :]

    world.wait_until(
        lambda: f"[{ns}/full] the stack already applied this spec" in since_restart(),
        "the restart's resume",
        timeout=60,
    )
    assert f"[{ns}/full] up done" not in since_restart()  # a restart runs no up

    world.kube.ok("-n", ns, "delete", "spotpool", "empty", "--wait=false")
    world.kube.ok("-n", ns, "delete", "spotpool", "full", "--wait=false")
    world.wait_until(lambda: world.get(ns, "empty") is None, "the empty pool gone", timeout=120)

    def explained() -> dict[str, object] | None:
        degraded = world.condition(ns, "full", "Degraded")
        return degraded if degraded.get("reason") == "SecretNotFound" else None

    degraded = world.wait_until(explained, "the full pool saying why it waits", timeout=120)
    assert f"{ns}/tencentcloud" in str(degraded["message"])
    assert "deletionPolicy to Retain" in str(degraded["message"])
    assert ("Warning", "SecretNotFound") in [(t, r) for t, r, _ in world.events(ns, "full")]
    world.kube.ok("-n", ns, "patch", "spotpool", "full", "--type=merge",
                  "-p", '{"spec":{"deletionPolicy":"Retain"}}')  # fmt: skip
    world.wait_until(lambda: world.get(ns, "full") is None, "the full pool gone", timeout=120)
    uid = full["metadata"]["uid"]
    assert sorted(world.cloud(uid)) == sorted(kept)  # retained, as asked
    for instance in kept:  # tidy up the emulator
        world.emulator.admin("POST", "/_emulator/reclaim", {"InstanceIds": [instance]})


def test_a_second_writers_in_flight_instance_is_not_terminated(world: OperatorWorld) -> None:
    """Another writer (a second install, a hand-run `pulumi up`) has just created an instance
    for the pool that this stack does not hold: the operator's runs leave it alone."""
    ns = world.namespace()
    world.apply(ns, pool_manifest("shared", replicas=1, maximum=5))
    pool = world.wait_ready(ns, "shared", 1)
    uid = pool["metadata"]["uid"]
    client, in_flight = tagged_instance(world, ns, "shared", uid, slot=3)
    world.apply(ns, pool_manifest("shared", replicas=2, maximum=5))  # an up (and its sweep) runs
    pool = world.wait_ready(ns, "shared", 2)
    assert in_flight in world.cloud(uid)
    assert in_flight not in _instance_ids(pool["status"])
    assert not [m for _, r, m in world.events(ns, "shared") if r == "OrphanTerminated"]
    client.TerminateInstances(_terminate(in_flight))  # the other writer's to clean up


def _terminate(instance_id: str) -> object:
    from tencentcloud.cvm.v20170312 import models

    request = models.TerminateInstancesRequest()
    request.InstanceIds = [instance_id]
    return request
