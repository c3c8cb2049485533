"""Termination notices end to end (real kube-apiserver, operator process, Pulumi engine,
emulator, one `spotpool notice-agent` per emulated instance): a notice leads to the slot's
replacement RUNNING before the cloud takes the old instance, and the pool ends at its size
with nothing leaked."""

from datetime import datetime
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from spotpool.localworld.agents import NoticeAgents
from tests.e2e._support.pool_views import by_slot
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
BOOT, NOTICE = 2.0, 45.0


@pytest.fixture
def notice_options() -> dict[str, Any]:
    return {"boot_seconds": BOOT, "notice_seconds": NOTICE}


def _when(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _samples(text: str) -> dict[tuple[str, str], float]:
    """The notice metrics of a scrape: (name, result or event) -> value."""
    return {
        (sample.name, sample.labels.get("result") or sample.labels.get("event", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in ("spotpool_notice_reports_total", "spotpool_surges_total")
    }


def test_a_notice_replaces_the_instance_before_the_cloud_takes_it(
    notice_world: OperatorWorld,
) -> None:
    ns = notice_world.namespace()
    notice_world.apply(ns, pool_manifest("gpu", replicas=2, refreshInterval="60s"))
    pool = notice_world.wait_ready(ns, "gpu", 2)
    uid = pool["metadata"]["uid"]
    first = by_slot(pool["status"])
    agents = NoticeAgents(notice_world.emulator, "ap-singapore", notice_world.directory / "agents")
    try:
        assert sorted(agents.boot(uid)) == sorted(first.values())  # user data installs them
        slot, victim = 0, first[0]
        notice_world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [victim]})

        def surging() -> dict[str, Any] | None:
            agents.boot(uid)  # the surge instance boots its agent too
            status = notice_world.status(ns, "gpu")
            return status if status.get("surges") else None

        status = notice_world.wait_until(surging, "the surge instance", timeout=NOTICE)
        (surge,) = status["surges"]
        assert surge["slot"] == slot and surge["replacing"] == victim
        assert surge["terminationTime"]
        assert status["notices"]["total"] == 1
        assert status["phase"] == "Ready" and status["readyReplicas"] == 2

        def promoted() -> dict[str, Any] | None:
            status = notice_world.status(ns, "gpu")
            done = (
                by_slot(status) == {slot: surge["instanceId"], 1: first[1]}
                and not status.get("surges")
                and status.get("readyReplicas") == 2
            )
            return status if done else None

        status = notice_world.wait_until(promoted, "the promotion", timeout=NOTICE + 60)
        assert agents.exit_codes()[victim] == 0  # it reported, then exited
        counted = _samples(notice_world.metrics())
        assert counted[("spotpool_notice_reports_total", "accepted")] == 1
        assert counted[("spotpool_surges_total", "started")] == 1
        assert counted[("spotpool_surges_total", "promoted")] == 1
        assert counted[("spotpool_surges_total", "retired")] == 0
    finally:
        agents.stop()

    # The emulator's timeline: the replacement ran before the old instance was taken.
    cloud = {
        i["InstanceId"]: i
        for i in notice_world.emulator.all_instances()
        if {"Key": "spotpool-pool-uid", "Value": uid} in (i.get("Tags") or [])
    }
    replacement, old = cloud[surge["instanceId"]], cloud[victim]
    running_from = _when(replacement["CreatedTime"]) + BOOT
    assert running_from < _when(old["SpotTerminationTime"])
    # Taken by the cloud, not by us; the pool may be whole while it is still TERMINATING.
    assert old["GoneReason"] == "reclaimed"
    assert old["Gone"] or old["InstanceState"] == "TERMINATING"
    # The pool ends at its size, with nothing leaked and nothing made twice.
    assert sorted(notice_world.cloud(uid)) == sorted(by_slot(status).values())
    assert len(cloud) == 3
    reasons = notice_world.reasons(ns, "gpu")
    assert {"TerminationNotice", "Surging", "Reclaimed"} <= set(reasons)
