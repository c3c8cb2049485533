"""The sweep of deleted pools' instances (strays.py) over fakes: it lists the fleet before the
pools, asks the backend before any termination, terminates only what the decision says (fenced
right before the send), posts an Event on a deleted pool it served (in that pool's namespace)
and counts; one account's failure is its own, each account has its own cap a pass, report mode
terminates nothing, recorded accounts come back."""

import json
from datetime import timedelta
from typing import Any

import kubernetes
import pytest
from pydantic import SecretStr
from spotpool_operator.reporting.kube import KubeCluster

from spotpool.engine.leftovers.accounts import AccountRecord
from spotpool.engine.tencent.credentials import Credentials
from tests.operator.fakes import run
from tests.operator.stray_world import GRACE, KEYS, KEYS_B, World, instance

pytestmark = pytest.mark.unit


def test_a_deleted_pools_instance_goes_after_two_listings_with_an_event_and_a_count() -> None:
    world = World(
        [
            instance("i-stray", "gone"),
            instance("i-young", "gone", age=5),  # its age does not matter, its pool's absence does
            instance("i-live", "live"),
            instance("i-theirs", "gone", install="staging"),
            instance("i-other-cluster", "gone", cluster="c-2"),
            instance("i-untagged", "gone", cluster=None),
            instance("i-kept", "gone", retained=True),
            instance("i-other-shard", "elsewhere"),
        ],
        pools={"live"},
        served={"gone", "live"},
    )
    sweep = world.sweep()
    assert run(sweep.sweep()) == [] and world.terminated == []  # one listing lacked it
    assert world.calls == ["instances", "pools"]  # a pool made after the listing is not missed
    world.now += timedelta(seconds=GRACE)
    swept = run(sweep.sweep())
    assert sorted(d.instance_id for d in swept) == ["i-stray", "i-young"]
    assert sorted(world.terminated) == ["i-stray", "i-young"]
    assert world.counted == 2
    assert world.calls[-3:] == ["instances", "pools", "backend"]  # the backend before any
    # asked about: the served pools with an instance of this install (no other install's)
    assert world.candidates == {"gone": "team-a/gone", "live": "team-a/live"}
    assert {e[:2] for e in world.events.posted} == {("Warning", "OrphanSwept")}


def test_what_a_stack_holds_is_not_swept_and_an_unreadable_backend_stops_all() -> None:
    world = World([instance("i-held", "gone"), instance("i-leak", "gone")], set(), {"gone"})
    world.held = frozenset({"i-held"})
    assert world.two_passes(world.sweep()) == ["i-leak"]
    world = World([instance("i-leak", "gone")], set(), {"gone"})
    world.held = None  # not read: reported (with why), never terminated
    assert world.two_passes(world.sweep()) == ["i-leak"] and world.terminated == []
    assert world.reported == 1 and "could not be read" in world.events.posted[0][2]


def test_a_failed_listing_of_the_pools_starts_the_clock_again() -> None:
    world = World([instance("i-1", "gone")], set(), {"gone"})
    sweep = world.sweep()
    run(sweep.sweep())
    world.pools = None  # the API server failed mid-pass: every pool counts as alive
    world.now += timedelta(seconds=GRACE)
    assert run(sweep.sweep()) == []
    world.pools = set()
    world.now += timedelta(seconds=GRACE / 3)
    assert run(sweep.sweep()) == []  # missing from one listing again, not two a grace apart
    world.now += timedelta(seconds=GRACE)
    assert [d.instance_id for d in run(sweep.sweep())] == ["i-1"]


def test_the_fence_is_checked_right_before_the_send() -> None:
    world = World([instance("i-1", "gone")], set(), {"gone"})
    world.fence_ok = False
    assert world.two_passes(world.sweep()) == [] and world.terminated == []
    assert world.counted == 0 and world.events.posted == []


def test_one_accounts_failure_is_its_own_and_each_account_has_a_cap_per_pass() -> None:
    world = World([], set(), {"a", "b"})
    world.fleets = {
        "AKID-a": [instance("i-a1", "a"), instance("i-a2", "a"), instance("i-a3", "a")],
        "AKID-b": [instance("i-b1", "b"), instance("i-b2", "b")],
    }
    sweep = world.sweep(cap=2)
    broken = Credentials(secret_id=SecretStr("AKID-broken"), secret_key=SecretStr("x"))
    sweep.remember(broken, "ap-singapore")  # sorted first of the three
    sweep.remember(KEYS_B, "ap-singapore")
    assert len(world.two_passes(sweep)) == 4  # the broken account did not stop the others
    assert sorted(world.terminated) == ["i-a1", "i-a2", "i-b1", "i-b2"]  # two of each
    assert [d.instance_id for d in run(sweep.sweep())] == ["i-a3"]  # the next pass: the rest


def test_one_tenants_fake_strays_do_not_use_up_another_accounts_cap() -> None:
    """Issue 46: 100 instances a tenant tagged as this install's on its own account used up the
    cap of a whole pass, and another account's true leak waited."""
    world = World([], set(), {"real"} | {f"fake-{i}" for i in range(100)})
    world.fleets = {
        "AKID-a": [instance(f"i-fake-{i}", f"fake-{i}") for i in range(100)],
        "AKID-b": [instance("i-leak", "real")],
    }
    sweep = world.sweep(cap=10)
    sweep.remember(KEYS_B, "ap-singapore")
    swept = world.two_passes(sweep)
    assert "i-leak" in swept and len(swept) == 11  # ten of the tenant's, and the leak


def test_events_only_for_pools_this_install_served_in_the_namespace_it_served_them_in() -> None:
    """Issue 46: the Event went to whatever namespace an instance's tag named (a tenant writes
    the tags of its own account's instances), for any uid."""
    world = World(
        [
            instance("i-seen", "gone", pool="team-b/victim"),  # its tag rewritten
            instance("i-never", "fake", pool="team-c/anything"),  # a uid never served here
        ],
        set(),
        {"gone", "fake"},
    )
    posted: list[tuple[str, str, str]] = []

    class Where:
        def post(self, ref: dict[str, Any], type_: str, reason: str, message: str) -> None:
            meta = ref["metadata"]
            posted.append((meta["namespace"], meta["name"], reason))

    world.events = Where()  # type: ignore[assignment]
    sweep = world.sweep()
    del sweep.seen["fake"]  # the tenant's uid: no pool of this install ever had it
    assert sorted(world.two_passes(sweep)) == ["i-never", "i-seen"]  # both leaks still go
    assert posted == [("team-a", "gone", "OrphanSwept")]


def test_report_mode_posts_an_event_and_counts_once_terminates_nothing() -> None:
    world = World([instance("i-1", "gone")], set(), {"gone"})
    sweep = world.sweep(mode="report")
    assert world.two_passes(sweep) == ["i-1"]
    run(sweep.sweep())
    assert world.terminated == [] and world.counted == 0
    assert world.reported == 1
    (event,) = world.events.posted
    assert event[:2] == ("Warning", "OrphanFound") and "would terminate instance i-1" in event[2]


def test_accounts_recorded_in_the_backend_are_swept_after_a_restart() -> None:
    world = World([], set(), {"gone"})
    world.fleets = {"AKID-b": [instance("i-1", "gone")]}
    sweep = world.sweep()
    record = AccountRecord(
        namespace="team-a", region="ap-singapore", seen=1e10,
        source={"credentialsSecretRef": {"name": "keys"}},
    )  # fmt: skip
    sweep.remember(KEYS, "ap-singapore", record)
    assert world.saved == [record]  # written for the next start
    world.records = [record]
    restarted = world.sweep()  # no live pool uses the key pair: only the record names it
    restarted.accounts.clear()
    assert world.two_passes(restarted) == ["i-1"]


def test_nothing_listed_nothing_asked_of_the_cluster() -> None:
    world = World([], pools=set(), served=set())
    assert run(world.sweep().sweep()) == []
    assert world.calls == ["instances"]
    assert world.terminated == [] and world.events.posted == []


def test_the_interval_follows_the_grace_within_bounds() -> None:
    world = World([], set(), set())
    sweep = world.sweep()
    assert sweep.interval == 300.0  # a 15-minute grace: every 5 minutes
    sweep.grace = 30
    assert sweep.interval == 10.0
    sweep.grace = 0
    assert sweep.interval == 5.0


class _NoClusterList:
    """A namespaced install's rights: no list across the cluster, reads in its namespaces."""

    def __init__(self, pools: dict[tuple[str, str], str]) -> None:
        self.pools = pools  # (namespace, name) -> uid

    def list_cluster_custom_object(self, *args: object, **kwargs: object) -> object:
        raise kubernetes.client.ApiException(status=403)

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, **kw: object
    ) -> dict[str, object]:
        if namespace == "elsewhere":
            raise kubernetes.client.ApiException(status=403)
        if namespace == "unserved":  # the version is not served (a CRD version change)
            raise kubernetes.client.ApiException(status=404, reason="Not Found")
        uid = self.pools.get((namespace, name))
        if uid is None:
            error = kubernetes.client.ApiException(status=404)
            error.body = json.dumps(
                {
                    "kind": "Status",
                    "reason": "NotFound",
                    "details": {"name": name, "kind": "spotpools"},
                }
            )
            raise error
        return {"metadata": {"uid": uid}}


def test_without_a_cluster_wide_list_each_candidate_is_read_and_unknowns_count_as_alive() -> None:
    cluster = KubeCluster.__new__(KubeCluster)  # no connection: the API is the fake
    cluster._custom = _NoClusterList({("team-a", "live"): "u-live", ("team-a", "again"): "u-new"})  # type: ignore[assignment]
    alive = cluster.pool_uids(
        {
            "u-live": "team-a/live",
            "u-gone": "team-a/gone",  # 404: deleted
            "u-old": "team-a/again",  # the name is another pool's now: this one is gone
            "u-unreadable": "elsewhere/p",  # 403: not known, so not swept
            "u-untagged": None,
        }
    )
    assert alive == {"u-live", "u-unreadable", "u-untagged"}


def test_a_404_for_the_resource_type_makes_the_listing_partial() -> None:
    cluster = KubeCluster.__new__(KubeCluster)
    cluster._custom = _NoClusterList({})  # type: ignore[assignment]
    assert cluster.pool_uids({"u-gone": "team-a/gone", "u-x": "unserved/p"}) is None


class _Failing:
    def list_cluster_custom_object(self, *args: object, **kwargs: object) -> object:
        raise kubernetes.client.ApiException(status=503)


def test_a_failed_cluster_wide_list_counts_as_everything_alive() -> None:
    cluster = KubeCluster.__new__(KubeCluster)
    cluster._custom = _Failing()  # type: ignore[assignment]
    assert cluster.pool_uids({"u-1": "team-a/p"}) is None


def test_an_account_whose_identity_claims_are_unproven_is_not_listed_nor_swept() -> None:
    """Issue 48: a cloud account whose claims (cloud_claims.py) were not read is held, as a
    failed listing: nothing listed or terminated there, its pools' clocks run on."""
    world = World([instance("i-stray", "gone")], set(), {"gone"})
    sweep = world.sweep()
    run(sweep.sweep())
    sweep.account_hold = lambda credentials, region: "its identity claims could not be read"
    world.now += timedelta(seconds=GRACE)
    assert run(sweep.sweep()) == [] and world.terminated == []
    assert world.calls == ["instances", "pools"]  # the held pass listed nothing
    sweep.account_hold = lambda credentials, region: None
    assert [d.instance_id for d in run(sweep.sweep())] == ["i-stray"]  # its clock ran on
