"""The stray decision (engine/leftovers/stray_rules.py `decide_strays`) and when a pool counts as
gone (`Missing`): instances of a deleted pool, every branch. Ownership is proven (this install
and this cluster), the backend decides what is held, "gone" is two listings a grace apart."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from spotpool.engine.leftovers.orphans import Action, Decision, Tagged
from spotpool.engine.leftovers.stray_rules import Fleet, Missing, decide_strays, would_go

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)
GRACE = timedelta(minutes=15)
OLD = NOW - timedelta(hours=1)


def tagged(
    instance_id: str, install: str | None = "prod", cluster: str | None = "c-1",
    state: str = "RUNNING", retained: bool = False, created: datetime | None = OLD,
) -> Tagged:  # fmt: skip
    return Tagged(
        instance_id, 0, state, "GN7.2XLARGE32", "ap-singapore-2", install, created, retained,
        cluster,
    )  # fmt: skip


def fleet(
    missing: frozenset[str] = frozenset({"gone"}),
    gone: frozenset[str] | None = None,
    serves: set[str] | None = None,
    cap: int = 10,
    **changes: object,
) -> Fleet:
    base = Fleet(
        install_id="prod",
        cluster_id="c-1",
        missing={uid: NOW - GRACE for uid in missing},
        gone=missing if gone is None else gone,
        serves=(lambda uid: True) if serves is None else serves.__contains__,
        cap=cap,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def actions(decisions: list[Decision]) -> dict[str, Action]:
    return {d.instance_id: d.action for d in decisions}


def test_a_gone_pools_instance_of_this_cluster_and_install_is_terminated() -> None:
    decisions = decide_strays(fleet(), {"gone": [tagged("i-1")]})
    assert actions(decisions) == {"i-1": Action.TERMINATE}
    assert decisions[0].pool_uid == "gone"
    assert "gone" in decisions[0].reason


def test_its_age_does_not_matter_only_the_time_its_pool_is_missing() -> None:
    young = tagged("i-1", created=NOW - timedelta(seconds=5))
    assert actions(decide_strays(fleet(), {"gone": [young]})) == {"i-1": Action.TERMINATE}


def test_a_live_pools_instances_are_not_strays() -> None:
    assert decide_strays(fleet(), {"live": [tagged("i-1")]}) == []


def test_another_clusters_another_installs_and_untagged_instances_are_never_terminated() -> None:
    decisions = decide_strays(
        fleet(),
        {
            "gone": [
                tagged("i-other-install", install="staging"),
                tagged("i-no-install", install=None),
                tagged("i-other-cluster", cluster="c-2"),  # same (default) install id
                tagged("i-before-this-version", cluster=None),
            ]
        },
    )
    assert set(actions(decisions).values()) == {Action.LEAVE}
    assert not any(d.ours for d in decisions)
    reasons = {d.instance_id: d.reason for d in decisions}
    assert "another cluster (c-2)" in reasons["i-other-cluster"]
    assert "no spotpool-cluster tag" in reasons["i-before-this-version"]


def test_what_a_stack_of_the_backend_holds_is_never_swept() -> None:
    """A pool re-created under a new uid, or a cluster rebuilt against the same backend: the
    stack (same name, same backend) holds the old uid's instances."""
    decisions = decide_strays(
        fleet(held=frozenset({"i-held"})), {"gone": [tagged("i-held"), tagged("i-leak")]}
    )
    assert actions(decisions) == {"i-held": Action.LEAVE, "i-leak": Action.TERMINATE}
    assert "a stack of the state backend holds it" in decisions[0].reason


def test_an_old_cluster_ids_instance_a_stack_holds_is_left_one_it_does_not_is_too() -> None:
    """Stack-held instances are the backend's to prove ours, whatever cluster tag they carry;
    an unheld one of an old cluster id is not this cluster's to sweep (set --cluster-id)."""
    decisions = decide_strays(
        fleet(held=frozenset({"i-held"})),
        {"gone": [tagged("i-held", cluster="old"), tagged("i-unheld", cluster="old")]},
    )
    assert actions(decisions) == {"i-held": Action.LEAVE, "i-unheld": Action.LEAVE}


def test_an_unreadable_backend_proves_nothing_unheld() -> None:
    decisions = decide_strays(fleet(held=None), {"gone": [tagged("i-1")]})
    assert actions(decisions) == {"i-1": Action.LEAVE}
    assert "could not be read" in decisions[0].reason


def test_missing_from_one_listing_is_not_gone() -> None:
    decisions = decide_strays(fleet(gone=frozenset()), {"gone": [tagged("i-1")]})
    assert actions(decisions) == {"i-1": Action.LEAVE}
    assert "not yet two a grace apart" in decisions[0].reason


def test_only_the_replica_serving_the_pools_shard_terminates() -> None:
    decisions = decide_strays(
        fleet(missing=frozenset({"mine", "theirs"}), serves={"mine"}),
        {"mine": [tagged("i-1")], "theirs": [tagged("i-2")]},
    )
    assert actions(decisions) == {"i-1": Action.TERMINATE, "i-2": Action.LEAVE}
    assert "another replica" in decisions[1].reason


def test_gone_instances_are_skipped_and_the_passs_cap_holds_across_pools() -> None:
    found = {
        "gone": [tagged("i-0", state="TERMINATING"), tagged("i-1"), tagged("i-2")],
        "gone-too": [tagged("i-3")],
    }
    decisions = decide_strays(fleet(missing=frozenset(found), cap=2), found)
    assert actions(decisions) == {
        "i-1": Action.TERMINATE, "i-2": Action.TERMINATE, "i-3": Action.LEAVE,
    }  # fmt: skip
    assert decide_strays(fleet(cap=0), {"gone": [tagged("i-1")]})[0].action is Action.LEAVE


def test_report_mode_reports_what_would_go_and_terminates_nothing() -> None:
    decisions = decide_strays(
        fleet(terminate=False), {"gone": [tagged("i-1"), tagged("i-2", cluster="c-2")]}
    )
    assert actions(decisions) == {"i-1": Action.REPORT, "i-2": Action.LEAVE}
    assert "--sweep report" in decisions[0].reason


def test_an_instance_without_a_pool_uid_is_left_alone() -> None:
    assert decide_strays(fleet(missing=frozenset({""})), {"": [tagged("i-1")]}) == []


def test_the_instances_of_a_pool_deleted_with_retain_stay() -> None:
    decisions = decide_strays(
        fleet(missing=frozenset({"kept", "gone"}), kept=frozenset({"kept"})),
        {"kept": [tagged("i-1")], "gone": [tagged("i-2", retained=True)]},
    )
    assert actions(decisions) == {"i-1": Action.LEAVE, "i-2": Action.LEAVE}
    assert all("Retain" in d.reason for d in decisions)


def test_a_retain_made_before_this_version_stays_it_has_no_cluster_tag() -> None:
    """Neither the retained tag nor a record, and an install tag: what a Retain deletion made
    before the sweep existed left. Its missing cluster tag alone keeps it."""
    decisions = decide_strays(fleet(), {"gone": [tagged("i-1", cluster=None)]})
    assert actions(decisions) == {"i-1": Action.LEAVE}


def test_the_backend_is_read_only_when_something_would_go() -> None:
    assert would_go(fleet(held=None), {"gone": [tagged("i-1")]})
    assert not would_go(fleet(held=None), {"gone": [tagged("i-1", cluster="c-2")]})
    assert not would_go(fleet(gone=frozenset()), {"gone": [tagged("i-1")]})


def test_a_pool_is_gone_when_two_listings_a_grace_apart_lack_it() -> None:
    missing = Missing()
    missing.observe({"p"}, set(), NOW)
    assert missing.gone(NOW, GRACE) == frozenset()
    missing.observe({"p"}, set(), NOW + GRACE / 2)
    assert missing.gone(NOW + GRACE / 2, GRACE) == frozenset()
    missing.observe({"p"}, set(), NOW + GRACE)
    assert missing.gone(NOW + GRACE, GRACE) == {"p"}


def test_a_sighting_between_starts_the_clock_again() -> None:
    missing = Missing()
    missing.observe({"p"}, set(), NOW)
    missing.observe({"p"}, {"p"}, NOW + GRACE / 2)  # listed again: it was not gone
    missing.observe({"p"}, set(), NOW + GRACE)
    assert missing.gone(NOW + GRACE, GRACE) == frozenset()
    assert missing.gone(NOW + GRACE * 2, GRACE) == {"p"}


def test_a_failed_or_partial_listing_counts_as_everything_alive() -> None:
    missing = Missing()
    missing.observe({"p", "q"}, set(), NOW)
    missing.observe({"p", "q"}, None, NOW + GRACE)  # 403, a 404 for the type, a 500
    assert missing.since == {}
    missing.observe({"p"}, set(), NOW + GRACE * 2)
    assert missing.gone(NOW + GRACE * 2, GRACE) == frozenset()


def test_uids_no_instance_carries_any_more_are_forgotten() -> None:
    missing = Missing()
    missing.observe({"p", "q"}, set(), NOW)
    missing.forget({"q"})
    assert set(missing.since) == {"q"}
