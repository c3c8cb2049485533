"""The orphan decision (engine/leftovers/orphans.py): every branch."""

from datetime import UTC, datetime, timedelta

import pytest

from spotpool.api.spec import SpotpoolSpec
from spotpool.api.stackconfig import PoolIdentity, StackConfig
from spotpool.engine.leftovers.orphans import Action, Decision, Situation, Tagged, decide

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 24, 5, 0, tzinfo=UTC)
OLD, YOUNG = NOW - timedelta(hours=1), NOW - timedelta(seconds=30)
CONFIG = StackConfig.from_spec(
    PoolIdentity(namespace="team-a", name="gpu", uid="uid-1"),
    SpotpoolSpec.model_validate(
        {
            "region": "ap-singapore",
            "availabilityZones": ["ap-singapore-2", "ap-singapore-3"],
            "instanceTypes": ["GN7.2XLARGE32", "GN7.5XLARGE80"],
            "minimum": 0,
            "maximum": 10,
            "replicas": 3,
            "imageId": "img-eb30mz89",
            "credentialsSecretRef": {"name": "tencentcloud"},
        }
    ),
)


def tagged(
    instance_id: str,
    slot: int | None,
    *,
    zone: str | None = None,
    type_: str = "GN7.2XLARGE32",
    install: str | None = "prod",
    created: datetime | None = OLD,
    state: str = "RUNNING",
    cluster: str | None = "c-1",
) -> Tagged:
    zone = zone or (CONFIG.zone_of(slot) if slot is not None else "ap-singapore-2")
    return Tagged(instance_id, slot, state, type_, zone, install, created, cluster=cluster)


def situation(**changes: object) -> Situation:
    base: dict[str, object] = {
        "config": CONFIG, "owned": {0: "ins-owned0"}, "install_id": "prod",
        "may_terminate": True, "now": NOW, "min_age": timedelta(minutes=15), "cap": 3,
        "cluster_id": "c-1",
    }  # fmt: skip
    base.update(changes)
    return Situation(**base)  # type: ignore[arg-type]


def actions(found: list[Decision]) -> dict[str, Action]:
    return {d.instance_id: d.action for d in found}


def test_owned_and_gone_instances_are_not_orphans() -> None:
    found = decide(situation(), [tagged("ins-owned0", 0), tagged("ins-x", 1, state="SHUTDOWN")])
    assert found == []


def test_an_old_orphan_in_a_free_slot_of_a_wanted_type_and_its_zone_is_adopted() -> None:
    assert actions(decide(situation(), [tagged("ins-a", 1)])) == {"ins-a": Action.ADOPT}


def test_one_adoption_per_slot_the_rest_terminated() -> None:
    found = actions(decide(situation(), [tagged("ins-a", 1), tagged("ins-b", 1)]))
    assert found == {"ins-a": Action.ADOPT, "ins-b": Action.TERMINATE}


def test_wrong_zone_wrong_type_owned_slot_or_no_slot_are_terminated() -> None:
    found = decide(
        situation(cap=5),
        [
            tagged("ins-zone", 1, zone="ap-singapore-9"),
            tagged("ins-type", 2, type_="S5.MEDIUM2"),
            tagged("ins-taken", 0),
            tagged("ins-beyond", 7),
            tagged("ins-noslot", None),
        ],
    )
    assert set(actions(found).values()) == {Action.TERMINATE}
    assert len(found) == 5


def test_only_this_clusters_and_installs_instances_are_adopted_or_terminated() -> None:
    found = decide(
        situation(),
        [
            tagged("ins-b", 5, install="staging"),
            tagged("ins-c", 5, install=None),
            tagged("ins-d", 5, cluster="c-2"),
            tagged("ins-e", 1, cluster=None),  # made before the cluster tag: not even adopted
            tagged("ins-f", 5),
        ],
    )
    assert actions(found) == {
        "ins-b": Action.LEAVE, "ins-c": Action.LEAVE, "ins-d": Action.LEAVE,
        "ins-e": Action.LEAVE, "ins-f": Action.TERMINATE,
    }  # fmt: skip
    reasons = {d.instance_id: d.reason for d in found}
    assert "another install" in reasons["ins-b"] and "unknown install" in reasons["ins-c"]
    assert "another cluster (c-2)" in reasons["ins-d"]
    assert "no spotpool-cluster tag" in reasons["ins-e"] and "never terminated" in reasons["ins-e"]
    assert not any(d.ours for d in found if d.action is Action.LEAVE)  # deletion waits for none


def test_run_by_hand_without_a_cluster_id_only_untagged_clusters_are_its_own() -> None:
    found = decide(
        situation(cluster_id=None), [tagged("ins-a", 5, cluster=None), tagged("ins-b", 5)]
    )
    assert actions(found) == {"ins-a": Action.TERMINATE, "ins-b": Action.LEAVE}


def test_a_young_orphan_is_left_alone_even_if_adoptable() -> None:
    found = decide(
        situation(), [tagged("ins-y", 1, created=YOUNG), tagged("ins-n", 9, created=None)]
    )
    assert actions(found) == {"ins-n": Action.LEAVE, "ins-y": Action.LEAVE}
    assert all("in flight" in d.reason for d in found)


def test_a_young_orphan_of_a_killed_runs_pending_create_is_decided() -> None:
    found = decide(
        situation(dead_run_slots=frozenset({1, 8})),
        [tagged("ins-y", 1, created=YOUNG), tagged("ins-z", 8, created=YOUNG)],
    )
    assert actions(found) == {"ins-y": Action.ADOPT, "ins-z": Action.TERMINATE}


def test_without_the_stack_and_lease_nothing_is_terminated_but_adoption_goes_on() -> None:
    found = decide(situation(may_terminate=False), [tagged("ins-a", 1), tagged("ins-b", 9)])
    assert actions(found) == {"ins-a": Action.ADOPT, "ins-b": Action.LEAVE}


def test_terminations_are_capped_per_pass() -> None:
    found = decide(situation(cap=2), [tagged(f"ins-{n}", 9) for n in range(4)])
    assert [d.action for d in found] == [Action.TERMINATE] * 2 + [Action.LEAVE] * 2


def test_destroy_wants_nothing_so_everything_old_and_ours_is_terminated() -> None:
    found = decide(situation(config=None, owned={}), [tagged("ins-a", 0), tagged("ins-b", 1)])
    assert set(actions(found).values()) == {Action.TERMINATE}
