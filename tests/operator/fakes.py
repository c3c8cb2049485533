"""Stand-ins for the engine, the cluster and the event sink, to test the reconciler alone."""

import asyncio
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import SecretStr
from spotpool_operator.basics.pools import PoolRef
from spotpool_operator.basics.settings import OperatorSettings
from spotpool_operator.process.reconciler import Reconciler
from spotpool_operator.reporting.kube import PoolUse, SecretNotFound, SecretRead
from spotpool_operator.reporting.ledgers import Ledger
from spotpool_operator.reporting.metrics import Metrics
from spotpool_operator.reporting.status_write import Fence
from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException

from spotpool.api.access import NamedPolicy
from spotpool.api.drift import InstanceDrift
from spotpool.api.reservations import Reservation
from spotpool.api.stackconfig import PoolIdentity, StackConfig
from spotpool.engine.basics.results import OperationKind, OperationResult, SlotOutput
from spotpool.engine.basics.settings import EngineSettings
from spotpool.engine.stacks.stack import EngineError
from spotpool.engine.tencent.credentials import Credentials

T = TypeVar("T")


@dataclass
class FakeCloud:
    """What the fake engine keeps per stack: slot -> instance id."""

    stacks: dict[str, dict[int, str]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    configs: list[StackConfig] = field(default_factory=list)
    credentials: list[str] = field(default_factory=list)
    gate: threading.Event | None = None  # when set up waits for it
    entered: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    running: int = 0
    most_running: int = 0
    fail_up: str | None = None
    fail_surge: str | None = None
    applied: dict[str, StackConfig] = field(default_factory=dict)  # stack -> last up's config
    throttled: bool = False  # the quick check answers RequestLimitExceeded
    next_id: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def new_id(self) -> str:
        with self.lock:
            self.next_id += 1
            return f"ins-{self.next_id:08d}"

    reclaimed: set[str] = field(default_factory=set)
    surges: dict[str, dict[int, str]] = field(default_factory=dict)  # stack -> slot -> id
    # stack -> instances changed by hand: refresh reports them, a whole up restores them
    drift: dict[str, list[InstanceDrift]] = field(default_factory=dict)

    def reclaim(self, stack: str, slot: int) -> str:
        """The cloud takes the instance away; the stack's state still lists it."""
        instance_id = self.stacks[stack][slot]
        self.reclaimed.add(instance_id)
        return instance_id


class FakeEngine:
    def __init__(self, cloud: FakeCloud, pool: PoolIdentity, credentials: Credentials) -> None:
        self.cloud = cloud
        self.pool = pool
        self.name = pool.stack_name
        cloud.credentials.append(credentials.secret_id.get_secret_value())
        self.known = cloud.stacks.setdefault(self.name, {})

    def _outputs(self) -> list[SlotOutput]:
        return [
            SlotOutput(
                slot=s,
                instance_id=i,
                public_ip="203.0.113.1",
                state="RUNNING",
                zone="ap-guangzhou-3",
                instance_type="GN7.2XLARGE32",
            )
            for s, i in sorted(self.known.items())
        ]

    def up(
        self,
        config: StackConfig,
        login_password: str | None = None,
        refresh: bool = False,
        replan: object = None,
    ) -> OperationResult:
        if refresh:  # the gone instances leave the state first, as a real refresh does
            for slot in [s for s, i in self.known.items() if i in self.cloud.reclaimed]:
                del self.known[slot]
        with self.cloud.lock:
            self.cloud.calls.append(("up+refresh" if refresh else "up", self.name))
            self.cloud.configs.append(config)
            self.cloud.running += 1
            self.cloud.most_running = max(self.cloud.most_running, self.cloud.running)
        self.cloud.entered.release()
        try:
            if self.cloud.gate is not None:
                assert self.cloud.gate.wait(10), "the test never opened the gate"
            if self.cloud.fail_up:
                raise EngineError(f"up of stack {self.name} failed: {self.cloud.fail_up}")
            created = 0
            for slot in range(config.count):
                if slot not in self.known:
                    self.known[slot] = self.cloud.new_id()
                    created += 1
            deleted = [s for s in self.known if s >= config.count]
            for slot in deleted:
                del self.known[slot]
            result = OperationResult(kind=OperationKind.UP, stack=self.name, seconds=0.1)
            result.changes = result.changes.model_copy(
                update={"create": created, "delete": len(deleted)}
            )
            result.instances = self._outputs()
            self.cloud.applied[self.name] = config
            if self.cloud.drift.pop(self.name, None):
                result.changes = result.changes.model_copy(update={"update": 1})
            return result
        finally:
            with self.cloud.lock:
                self.cloud.running -= 1

    def applied_config(self) -> StackConfig | None:
        self.cloud.calls.append(("applied_config", self.name))
        return self.cloud.applied.get(self.name)

    def replace_slots(
        self,
        config: StackConfig,
        slots: list[int],
        login_password: str | None = None,
        replan: object = None,
    ) -> OperationResult:
        """Like the real one: the gone slots leave the state, then an up fills them."""
        self.cloud.calls.append(("replace_slots", self.name))
        for slot in slots:
            self.known.pop(slot, None)
        kept = [d for d in self.cloud.drift.get(self.name, []) if d.slot not in slots]
        result = self.up(config, login_password)
        if kept:  # only the targeted slots changed
            self.cloud.drift[self.name] = kept
        return result

    def start_surge(
        self, config: StackConfig, slots: list[int], login_password: str | None = None
    ) -> OperationResult:
        """Like the real one: a second instance beside each noticed slot's."""
        self.cloud.calls.append(("start_surge", self.name))
        if self.cloud.fail_surge:
            raise EngineError(f"up of stack {self.name} failed: {self.cloud.fail_surge}")
        surges = self.cloud.surges.setdefault(self.name, {})
        for slot in slots:
            surges.setdefault(slot, self.cloud.new_id())
        result = OperationResult(kind=OperationKind.UP, stack=self.name, seconds=0.1)
        result.instances = self._outputs()
        result.surges = [
            SlotOutput(slot=s, instance_id=i, state="RUNNING") for s, i in sorted(surges.items())
        ]
        return result

    def retire_surges(
        self, config: StackConfig, slots: list[int], login_password: str | None = None
    ) -> OperationResult:
        self.cloud.calls.append(("retire_surges", self.name))
        surges = self.cloud.surges.setdefault(self.name, {})
        for slot in slots:
            surges.pop(slot, None)
        result = OperationResult(kind=OperationKind.UP, stack=self.name, seconds=0.1)
        result.instances = self._outputs()
        result.surges = [
            SlotOutput(slot=s, instance_id=i, state="RUNNING") for s, i in sorted(surges.items())
        ]
        return result

    def refresh(self) -> OperationResult:
        self.cloud.calls.append(("refresh", self.name))
        result = OperationResult(kind=OperationKind.REFRESH, stack=self.name, seconds=0.1)
        result.instances = self._outputs()  # outputs are stale after a refresh, as in Pulumi
        result.gone_slots = sorted(s for s, i in self.known.items() if i in self.cloud.reclaimed)
        for slot in result.gone_slots:
            del self.known[slot]
        result.drift = [d for d in self.cloud.drift.get(self.name, []) if d.slot in self.known]
        return result

    def destroy(self, remove_stack: bool = True) -> OperationResult:
        self.cloud.calls.append(("destroy", self.name))
        result = OperationResult(kind=OperationKind.DESTROY, stack=self.name, seconds=0.1)
        result.changes = result.changes.model_copy(update={"delete": len(self.known)})
        self.known.clear()
        del self.cloud.stacks[self.name]
        return result

    def forget(self) -> None:
        self.cloud.calls.append(("forget", self.name))
        del self.cloud.stacks[self.name]

    def state_instance_ids(self) -> dict[int, str]:
        return dict(self.known)

    def held_instance_ids(self) -> dict[str, str]:
        surges = self.cloud.surges.get(self.name, {})
        held = {f"slot-{s}": i for s, i in self.known.items()}
        return held | {f"surge-{s}": i for s, i in surges.items()}


@dataclass
class FakeCluster:
    secrets: dict[tuple[str, str], dict[str, bytes]] = field(default_factory=dict)
    statuses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    unconsenting: set[tuple[str, str]] = field(default_factory=set)  # Secrets not opted in
    policies: list[NamedPolicy] = field(default_factory=list)
    labels: dict[str, dict[str, str]] = field(default_factory=dict)  # namespace -> labels
    pools: dict[str, list[PoolUse]] = field(default_factory=dict)  # namespace -> pools
    ledgers: dict[str, dict[str, Reservation]] = field(default_factory=dict)  # policy -> uid ->
    versions: dict[str, int] = field(default_factory=dict)  # policy -> resourceVersion
    conflicts: int = 0
    ledger_lock: threading.Lock = field(default_factory=threading.Lock)  # one write at a time

    def read_secret(self, namespace: str, name: str) -> SecretRead:
        try:
            data = self.secrets[(namespace, name)]
        except KeyError:
            raise SecretNotFound(f"Secret {namespace}/{name} not found") from None
        return SecretRead(data, consents=(namespace, name) not in self.unconsenting)

    def access_policies(self) -> list[NamedPolicy]:
        return list(self.policies)

    def fresh_access_policies(self) -> list[NamedPolicy]:
        return list(self.policies)

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        return dict(self.labels.get(namespace, {}))

    def pools_in(self, namespace: str) -> list[PoolUse]:
        return list(self.pools.get(namespace, []))

    def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], fence: Fence | None = None
    ) -> dict[str, Any] | None:
        self.statuses.setdefault(f"{namespace}/{name}", []).append(status)
        return fence.writer if fence else None

    def last(self, key: str) -> dict[str, Any]:
        return self.statuses[key][-1]

    # The policies' ledgers (status.reservations), with the API server's resourceVersion check:
    # `conflicts` more writes are refused as if another replica wrote first.
    def read_ledger(self, policy: str) -> Ledger | None:
        found = next((p for p in self.policies if p.name == policy), None)
        if found is None:
            return None
        entries = dict(self.ledgers.get(policy, {}))
        version = str(self.versions.get(policy, 0))
        return Ledger(policy, version, found.spec.limits, entries, found.problem)

    def write_ledger(self, ledger: Ledger, changes: dict[str, Reservation | None]) -> bool:
        policy = ledger.policy
        with self.ledger_lock:
            version = self.versions.get(policy, 0)
            self.versions[policy] = version + 1
            if self.conflicts > 0 or ledger.version != str(version):
                self.conflicts = max(0, self.conflicts - 1)
                return False
            entries = self.ledgers.setdefault(policy, {})
            for uid, entry in changes.items():
                if entry is None:
                    entries.pop(uid, None)
                else:
                    entries[uid] = entry
            return True


@dataclass
class RecordedEvents:
    posted: list[tuple[str, str, str]] = field(default_factory=list)

    def post(self, ref: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.posted.append((type_, reason, message))

    def reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.posted]


def settings(tmp_path: Path, **extra: Any) -> OperatorSettings:
    engine = EngineSettings(
        backend_url=f"file://{tmp_path / 'backend'}",
        passphrase=SecretStr("unit-tests"),
        work_root=tmp_path / "work",
    )
    return OperatorSettings(engine=engine, **extra)


@dataclass
class World:
    reconciler: Reconciler
    cloud: FakeCloud
    cluster: FakeCluster
    events: RecordedEvents
    metrics: Metrics


def make_world(tmp_path: Path, quick_check: bool = False, **extra: Any) -> World:
    cloud, cluster, events, metrics = FakeCloud(), FakeCluster(), RecordedEvents(), Metrics()
    cluster.secrets[("team-a", "tencentcloud")] = {
        "secretId": b"AKIDfromsecret",
        "secretKey": b"secret-key-from-secret",
    }
    factory: Callable[..., FakeEngine] = lambda pool, creds, region, progress: FakeEngine(  # noqa: E731
        cloud, pool, creds
    )

    def alive(pool: PoolIdentity, creds: Credentials, region: str) -> set[str]:
        cloud.calls.append(("describe", pool.stack_name))
        if cloud.throttled:
            raise TencentCloudSDKException("RequestLimitExceeded", "too many requests")
        known = cloud.stacks.get(pool.stack_name, {})
        return {i for i in known.values() if i not in cloud.reclaimed}

    reconciler = Reconciler(
        settings(tmp_path, **extra),
        cluster,
        events,
        metrics,
        factory,
        cloud_lookup=alive if quick_check else None,
    )
    return World(reconciler, cloud, cluster, events, metrics)


def noticed_world(tmp_path: Path) -> tuple[World, dict[str, Any], dict[int | None, str]]:
    """A world with termination notices on and the default pool converged: the world, the
    pool's body, its instances by slot."""
    world = make_world(tmp_path, notice_port=8090)
    body = pool_body()
    run(world.reconciler.converge(ref(body)))
    pool = world.reconciler.pool(ref(body))
    return world, body, {i.slot: i.instance_id for i in pool.status.instances}


def pool_body(
    name: str = "gpu",
    generation: int = 1,
    uid: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "devops.jokerbai.com/v1",
        "kind": "Spotpool",
        "metadata": {
            "namespace": "team-a",
            "name": name,
            "uid": uid or f"uid-{name}",
            "generation": generation,
        },
        "spec": {
            "region": "ap-singapore",
            "availabilityZone": "ap-singapore-2",
            "instanceType": "GN7.2XLARGE32",
            "minimum": 2,
            "maximum": 5,
            "imageId": "img-eb30mz89",
            "credentialsSecretRef": {"name": "tencentcloud"},
            **spec,
        },
    }


def ref(body: dict[str, Any]) -> PoolRef:
    return PoolRef.from_body(body)


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on a loop of its own, leaving the thread's event loop policy alone.

    asyncio.run() ends by setting the thread's loop to None, after which
    asyncio.get_event_loop() raises, and other tests (Pulumi's mocks) rely on it.
    """
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
