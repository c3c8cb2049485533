"""The stray sweep's world of fakes (strays.py): a fleet, the pools, the backend's verdict, what
was terminated and said; shared by the sweep's tests."""

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import SecretStr
from spotpool_operator.cloud.strays import Backend, StraySweep

from spotpool.api.stackconfig import PoolIdentity
from spotpool.engine.leftovers.accounts import AccountRecord
from spotpool.engine.leftovers.holdings import Holdings
from spotpool.engine.tencent.cloud import FleetInstance
from spotpool.engine.tencent.credentials import Credentials
from tests.operator.fakes import RecordedEvents, run

NOW = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)
KEYS = Credentials(secret_id=SecretStr("AKID-a"), secret_key=SecretStr("key-a"))
KEYS_B = Credentials(secret_id=SecretStr("AKID-b"), secret_key=SecretStr("key-b"))
GRACE = 900


def instance(instance_id: str, uid: str, age: float = 3600, **extra: object) -> FleetInstance:
    return FleetInstance.model_validate(
        {
            "instance_id": instance_id, "slot": 0, "state": "RUNNING",
            "instance_type": "GN7.2XLARGE32", "zone": "ap-singapore-2", "install": "prod",
            "cluster": "c-1",
            "created": NOW - timedelta(seconds=age), "pool_uid": uid, "pool": f"team-a/{uid}",
            **extra,
        }
    )  # fmt: skip


class World:
    def __init__(
        self, fleet: list[FleetInstance], pools: set[str] | None, served: set[str]
    ) -> None:
        self.fleet, self.pools, self.served = fleet, pools, served
        self.fleets: dict[str, list[FleetInstance]] = {}  # per SecretId, when set
        self.calls: list[str] = []
        self.terminated: list[str] = []
        self.counted = 0
        self.reported = 0
        self.candidates: dict[str, str | None] = {}
        self.events = RecordedEvents()
        self.now = NOW
        self.held: frozenset[str] | None = frozenset()
        self.saved: list[AccountRecord] = []
        self.records: list[AccountRecord] = []
        self.fence_ok = True
        self.backend_says: dict[str, Any] = {"kept": frozenset()}  # more of Holdings' fields

    def sweep(self, mode: str = "terminate", cap: int = 100) -> StraySweep:
        def lister(credentials: Credentials, region: str) -> list[FleetInstance]:
            self.calls.append("instances")
            secret = credentials.secret_id.get_secret_value()
            if secret == "AKID-broken":
                raise RuntimeError("AuthFailure")
            listed = self.fleets.get(secret, self.fleet)
            return [i for i in listed if i.instance_id not in self.terminated]

        def pool_uids(candidates: Mapping[str, str | None]) -> set[str] | None:
            self.calls.append("pools")
            self.candidates = dict(candidates)
            return self.pools

        def terminate(
            credentials: Credentials, region: str, ids: list[str], check: Callable[[], None]
        ) -> None:
            if not self.fence_ok:
                self.served.clear()  # the shard moved while the pass ran
            check()
            self.terminated += ids

        def holdings() -> Holdings | None:
            self.calls.append("backend")
            return None if self.held is None else Holdings(self.held, **self.backend_says)

        def count(n: int) -> None:
            self.counted += n

        def reported(n: int) -> None:
            self.reported += n

        backend = Backend(holdings, self.saved.append, lambda keep: self.records)
        sweep = StraySweep(
            lister, terminate, pool_uids, self.served.__contains__, self.events, "prod",
            grace=GRACE, backend=backend, cluster_id="c-1", mode=mode,
            resolve=lambda record: KEYS_B, on_swept=count, on_reported=reported, cap=cap,
            clock=lambda: self.now,
        )  # fmt: skip
        sweep.remember(KEYS, "ap-singapore")
        for uid in sorted(self.served):  # pools this replica served: their Events are posted
            sweep.remember(KEYS, "ap-singapore", pool=PoolIdentity(namespace="team-a", name=uid,
                                                                  uid=uid))  # fmt: skip
        return sweep

    def two_passes(self, sweep: StraySweep) -> list[str]:
        """A pass, and one a grace later: what the second terminated (or reported)."""
        run(sweep.sweep())
        self.now += timedelta(seconds=GRACE)
        return [d.instance_id for d in run(sweep.sweep())]
