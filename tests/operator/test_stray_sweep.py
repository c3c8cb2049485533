"""The sweep of deleted pools' instances (strays.py) over fakes: it lists the fleet before the
pools, terminates only what the decision says, posts an Event on the deleted pool and counts."""

from datetime import UTC, datetime, timedelta

from pydantic import SecretStr
from spotpool_operator.strays import StraySweep

from spotpool.engine.cloud import FleetInstance
from spotpool.engine.credentials import Credentials
from tests.operator.fakes import RecordedEvents, run

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
        self.events = RecordedEvents()

    def sweep(self) -> StraySweep:
        def lister(credentials: Credentials, region: str) -> list[FleetInstance]:
            self.calls.append("instances")
            return self.fleet

        def pool_uids() -> set[str]:
            self.calls.append("pools")
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
