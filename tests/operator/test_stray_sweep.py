"""The sweep of deleted pools' instances (strays.py) over fakes: it lists the fleet before the
pools, terminates only what the decision says, posts an Event on the deleted pool and counts."""

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import kubernetes
import pytest
from pydantic import SecretStr
from spotpool_operator.cloud.strays import StraySweep
from spotpool_operator.reporting.kube import KubeCluster

from spotpool.engine.tencent.cloud import FleetInstance
from spotpool.engine.tencent.credentials import Credentials
from tests.operator.fakes import RecordedEvents, run

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)
KEYS = Credentials(secret_id=SecretStr("AKID-a"), secret_key=SecretStr("key-a"))


def instance(instance_id: str, uid: str, age: float = 3600, **extra: object) -> FleetInstance:
    return FleetInstance.model_validate(
        {
            "instance_id": instance_id, "slot": 0, "state": "RUNNING",
            "instance_type": "GN7.2XLARGE32", "zone": "ap-singapore-2", "install": "prod",
            "created": NOW - timedelta(seconds=age), "pool_uid": uid, "pool": f"team-a/{uid}",
            **extra,
        }
    )  # fmt: skip


class World:
    def __init__(self, fleet: list[FleetInstance], pools: set[str], served: set[str]) -> None:
        self.fleet, self.pools, self.served = fleet, pools, served
        self.calls: list[str] = []
        self.terminated: list[str] = []
        self.counted = 0
        self.candidates: dict[str, str | None] = {}
        self.events = RecordedEvents()

    def sweep(self) -> StraySweep:
        def lister(credentials: Credentials, region: str) -> list[FleetInstance]:
            self.calls.append("instances")
            return self.fleet

        def pool_uids(candidates: Mapping[str, str | None]) -> set[str]:
            self.calls.append("pools")
            self.candidates = dict(candidates)
            return self.pools

        def terminate(credentials: Credentials, region: str, ids: list[str]) -> None:
            self.terminated += ids

        def count(n: int) -> None:
            self.counted += n

        sweep = StraySweep(
            lister, terminate, pool_uids, self.served.__contains__, self.events, "prod",
            grace=900, on_swept=count, clock=lambda: NOW,
        )  # fmt: skip
        sweep.remember(KEYS, "ap-singapore")
        return sweep


def test_a_deleted_pools_old_instance_goes_with_an_event_and_a_count() -> None:
    world = World(
        [
            instance("i-stray", "gone"),
            instance("i-young", "gone", age=60),
            instance("i-live", "live"),
            instance("i-theirs", "gone", install="staging"),
            instance("i-kept", "gone", retained=True),
            instance("i-other-shard", "elsewhere"),
        ],
        pools={"live"},
        served={"gone", "live"},
    )
    swept = run(world.sweep().sweep())
    assert [d.instance_id for d in swept] == ["i-stray"]
    assert world.terminated == ["i-stray"]
    assert world.counted == 1
    assert world.calls == ["instances", "pools"]  # a pool made after the listing is not missed
    # asked about: the served pools with an instance of this install (no other install's)
    assert world.candidates == {"gone": "team-a/gone", "live": "team-a/live"}
    (event,) = world.events.posted
    assert event[:2] == ("Warning", "OrphanSwept") and "i-stray" in event[2]


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
        uid = self.pools.get((namespace, name))
        if uid is None:
            raise kubernetes.client.ApiException(status=404)
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
