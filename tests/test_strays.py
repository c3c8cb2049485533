"""The stray decision (engine/leftovers/orphans.py `decide_strays`): instances of this install whose
pool no longer exists, every branch."""

from datetime import UTC, datetime, timedelta

import pytest

from spotpool.engine.leftovers.orphans import Action, Fleet, Tagged, decide_strays

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)
OLD, YOUNG = NOW - timedelta(hours=1), NOW - timedelta(seconds=30)


def tagged(
    instance_id: str, install: str | None = "prod", created: datetime | None = OLD,
    state: str = "RUNNING",
) -> Tagged:  # fmt: skip
    return Tagged(instance_id, 0, state, "GN7.2XLARGE32", "ap-singapore-2", install, created)


def fleet(
    pools: frozenset[str] = frozenset({"live"}), serves: set[str] | None = None, cap: int = 10
) -> Fleet:
    return Fleet(
        install_id="prod",
        pools=frozenset(pools),
        serves=(lambda uid: True) if serves is None else serves.__contains__,
        now=NOW,
        min_age=timedelta(minutes=15),
        cap=cap,
    )


def actions(decisions: list) -> dict[str, Action]:  # type: ignore[type-arg]
    return {d.instance_id: d.action for d in decisions}


def test_an_old_instance_of_this_install_whose_pool_is_gone_is_terminated() -> None:
    decisions = decide_strays(fleet(), {"gone": [tagged("i-1")]})
    assert actions(decisions) == {"i-1": Action.TERMINATE}
    assert decisions[0].pool_uid == "gone"
    assert "gone" in decisions[0].reason


def test_a_live_pools_instances_are_not_strays() -> None:
    assert decide_strays(fleet(), {"live": [tagged("i-1")]}) == []


def test_young_ones_are_left_a_create_may_be_in_flight() -> None:
    decisions = decide_strays(
        fleet(), {"gone": [tagged("i-1", created=YOUNG), tagged("i-2", created=None)]}
    )
    assert actions(decisions) == {"i-1": Action.LEAVE, "i-2": Action.LEAVE}
    assert all("young" in d.reason for d in decisions)


def test_another_installs_and_untagged_instances_are_never_terminated() -> None:
    decisions = decide_strays(
        fleet(),
        {"gone": [tagged("i-other", install="staging"), tagged("i-untagged", install=None)]},
    )
    assert actions(decisions) == {"i-other": Action.LEAVE, "i-untagged": Action.LEAVE}
    assert not any(d.ours for d in decisions)


def test_only_the_replica_serving_the_pools_shard_terminates() -> None:
    decisions = decide_strays(
        fleet(serves={"mine"}), {"mine": [tagged("i-1")], "theirs": [tagged("i-2")]}
    )
    assert actions(decisions) == {"i-1": Action.TERMINATE, "i-2": Action.LEAVE}
    assert "another replica" in decisions[1].reason


def test_gone_instances_are_skipped_and_the_cap_holds() -> None:
    found = {"gone": [tagged("i-0", state="TERMINATING")] + [tagged(f"i-{n}") for n in (1, 2, 3)]}
    decisions = decide_strays(fleet(cap=2), found)
    assert actions(decisions) == {
        "i-1": Action.TERMINATE,
        "i-2": Action.TERMINATE,
        "i-3": Action.LEAVE,
    }


def test_an_instance_without_a_pool_uid_is_left_alone() -> None:
    assert decide_strays(fleet(), {"": [tagged("i-1")]}) == []


def test_the_instances_of_a_pool_deleted_with_retain_stay() -> None:
    recorded = Fleet("prod", frozenset(), lambda uid: True, NOW, timedelta(minutes=15), 10,
                     kept=frozenset({"kept"}))  # fmt: skip
    tagged_kept = Tagged("i-2", 0, "RUNNING", "GN7.2XLARGE32", "ap-singapore-2", "prod", OLD, True)
    decisions = decide_strays(recorded, {"kept": [tagged("i-1")], "gone": [tagged_kept]})
    assert actions(decisions) == {"i-1": Action.LEAVE, "i-2": Action.LEAVE}
    assert all("Retain" in d.reason for d in decisions)
