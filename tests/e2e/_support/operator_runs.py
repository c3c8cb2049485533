"""What more than one e2e module does to an operator: kill it mid-`up` (its stack lock left
behind), bring it back under another hostname, make an instance its stack does not hold."""

import json
import os
import uuid
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from spotpool.engine.state.backend_files import BackendFiles, open_backend
from spotpool.engine.tencent import cloud
from spotpool.engine.tencent.credentials import Credentials
from tests.emulator.harness import spot_request
from tests.operator.world import OperatorWorld, pool_manifest

INSTALL_LEASE = "spotpool-operator"  # the Lease (and install name) OperatorWorld's operators hold


def instance_ids(status: dict[str, Any]) -> list[str]:
    return [str(i["instanceId"]) for i in status.get("instances") or []]


@dataclass
class KilledMidUp:
    """A pool whose operator was SIGKILLed (whole process tree) while its `up` held the lock."""

    files: BackendFiles
    namespace: str
    name: str
    uid: str
    old_host: str  # the hostname in the lock the killed run left

    def locks(self) -> list[str]:
        """The stack's lock files in the backend."""
        stack = f"/{self.namespace}.{self.name}/"
        return [k for k in self.files.keys(".pulumi/locks/") if stack in k and k.endswith(".json")]


def kill_mid_up(world: OperatorWorld, name: str = "moved", replicas: int = 3) -> KilledMidUp:
    """Apply pool `name`, wait for its first `up` to hold the lock with an instance made, and
    kill the operator there; exactly one lock is left behind."""
    backend = world.backend_url or f"file://{world.directory / 'backend'}"
    files = open_backend(backend, {**os.environ, **world.backend_env})
    assert files is not None
    ns = world.namespace()
    world.apply(ns, pool_manifest(name, minimum=1, maximum=6, replicas=replicas))
    uid = world.wait_until(
        lambda: (world.get(ns, name) or {}).get("metadata", {}).get("uid"), "the uid"
    )
    killed = KilledMidUp(files, ns, name, str(uid), "")
    world.wait_until(
        lambda: killed.locks() and world.cloud(uid),
        "the up holding its lock with an instance made",
        timeout=120,
    )
    world.kill()
    (stale,) = killed.locks()  # the killed run's lock is left behind
    killed.old_host = json.loads(files.read(stale))["hostname"]
    return killed


def killed_mid_up_and_replaced_under_another_hostname(world: OperatorWorld) -> None:
    """A pod replaced mid-`up` (rollout, eviction, OOM): the whole tree dies at once and the
    next operator runs under another name. Its Lease proves the old lock's owner gone: the
    lock is broken, the pool converges with no leak or duplicate."""
    killed = kill_mid_up(world)
    world.hostname = f"spotpool-operator-{uuid.uuid4().hex[:6]}"
    assert world.hostname != killed.old_host
    world.start()
    pool = world.wait_ready(killed.namespace, killed.name, 3, timeout=300)

    ids = sorted(instance_ids(pool["status"]))
    assert sorted(world.cloud(killed.uid)) == ids and len(set(ids)) == 3  # no leak, no duplicate
    assert not killed.locks()

    def recovered() -> list[str]:  # Events are posted in the background: one may lag the status
        events = world.events(killed.namespace, killed.name)
        named = f"@{killed.old_host}"
        found = [m for _, r, m in events if r == "Recovered"]
        return [m for m in found if named in m and "earlier holder" in m]

    world.wait_until(recovered, f"a Recovered event naming {killed.old_host}'s lock", 60)


def tagged_instance(
    world: OperatorWorld, ns: str, name: str, uid: str, slot: int
) -> tuple[Any, str]:
    """An instance of this install and cluster tagged for the pool's `slot` that its stack does
    not hold (another writer's, or a killed run's create): the client that made it, and its id."""
    return launch_tagged(
        world, ns, name, uid, slot, f"default.{INSTALL_LEASE}", cluster_uid(world.kube)
    )


def cluster_uid(kube: Any) -> str:
    """The cluster's identity as its operators tag it: the kube-system Namespace's uid."""
    return str(kube.ok("get", "namespace", "kube-system", "-o", "jsonpath={.metadata.uid}"))


def launch_tagged(
    world: OperatorWorld,
    ns: str,
    name: str,
    uid: str,
    slot: int,
    install: str | None,
    cluster: str | None = None,
) -> tuple[Any, str]:
    """What a late RunInstances for the pool's `slot` lands as (tagged for `install`, or for
    no install as before installs had a tag; for `cluster`, or for none as before clusters had
    a tag): the client that made it, and its id."""
    tags = {"spotpool-pool-uid": uid, "spotpool-pool": f"{ns}/{name}", "spotpool-slot": str(slot)}
    if install is not None:
        tags["spotpool-install"] = install
    if cluster is not None:
        tags["spotpool-cluster"] = cluster
    keys = Credentials(
        secret_id=SecretStr(world.emulator.secret_id),
        secret_key=SecretStr(world.emulator.secret_key),
    )
    client = cloud.cvm(keys, "ap-singapore", world.emulator.endpoint)
    request = spot_request(count=1, zone="ap-singapore-2", instance_type="GN7.2XLARGE32",
                           tags=tags, ImageId="img-eb30mz89")  # fmt: skip
    (made,) = [str(i) for i in client.RunInstances(request).InstanceIdSet]
    return client, made
