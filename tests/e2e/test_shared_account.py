"""Safe to share an account (issue 38), as users meet it: two clusters with default installs on
one cloud account (one emulator) never touch each other's instances while each still sweeps its
own late leak; an instance a Retain deletion kept before this version is never swept; a pool
re-created under a new uid, and a cluster rebuilt against the same backend, take their
instances back (0 launched, 0 terminated); report mode (the rebuilt cluster's) terminates
nothing. Then the listing logic on a real API server: a CRD version change under namespaced
RBAC, and an API server failing mid-pass, each counting as "every pool alive".

One world for the module: cluster A (the session's) and cluster B (its own), both operators on
one emulator with the same default install id and a 10 s orphan grace; B is later "lost" and
rebuilt as cluster C over B's backend."""

import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr

from spotpool.api.access import CONSENT_KEY
from spotpool.api.crd import CRD_PATH
from spotpool.localworld.kube import Kube
from spotpool.localworld.slow_proxy import StallProxy, target_of
from tests.e2e._support.operator_runs import INSTALL_LEASE, cluster_uid, launch_tagged
from tests.e2e.conftest import ROOT, local_cluster, operator_world
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
GRACE = 10.0  # --orphan-grace: the sweep looks every 5 s
ENV = {"SPOTPOOL_ORPHAN_GRACE": f"{GRACE:.0f}s", "SPOTPOOL_OPERATION_TIMEOUT": "90s"}
INSTALL = f"default.{INSTALL_LEASE}"  # both clusters' default install id


@dataclass
class Shared:
    a: OperatorWorld
    b: OperatorWorld
    directory: Path
    pools: dict[str, tuple[str, str, list[str]]] = field(default_factory=dict)  # name -> ns,uid,ids
    leak_seconds: dict[str, float] = field(default_factory=dict)
    before_version: tuple[str, str] = ("", "")  # (namespace, instance) a pre-upgrade Retain left
    reported: str = ""  # cluster C's late leak, for its report-mode sweep


@pytest.fixture(scope="module")
def shared(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    directory = tmp_path_factory.mktemp("shared-account")
    (directory / "a").mkdir()
    with (
        operator_world(kube, directory / "a", env=ENV) as a,
        local_cluster(directory / "b-cluster") as kube_b,
    ):
        kube_b.ok("apply", "-f", str(ROOT / CRD_PATH))
        kube_b.ok("wait", "--for=condition=Established", "crd/spotpools.devops.jokerbai.com")
        (directory / "b" / "backend").mkdir(parents=True)
        b = OperatorWorld(kube_b, a.emulator, directory / "b", env=ENV)
        try:
            b.start()
            yield Shared(a, b, directory)
        finally:
            b.stop()


def _passes(world: OperatorWorld) -> int:
    found = re.findall(r"stray sweep (\d+):", world.log.read_text(errors="replace"))
    return int(found[-1]) if found else 0


def _two_more_passes(*worlds: OperatorWorld) -> None:
    since = [_passes(w) for w in worlds]
    for world, start in zip(worlds, since, strict=True):
        world.wait_until(partial(_passed, world, start + 2), "two more sweeps", 60)


def _passed(world: OperatorWorld, count: int) -> bool:
    return _passes(world) >= count


def _ever(world: OperatorWorld, key: str, value: str) -> dict[str, str]:
    """id -> state of every instance the emulator ever made with this tag (gone ones too)."""
    return {
        item["InstanceId"]: "GONE" if item.get("Gone") else item["InstanceState"]
        for item in world.emulator.all_instances()
        if {"Key": key, "Value": value} in (item.get("Tags") or [])
    }


def _tags(world: OperatorWorld, instance_id: str) -> dict[str, str]:
    (item,) = [i for i in world.emulator.all_instances() if i["InstanceId"] == instance_id]
    return {t["Key"]: t["Value"] for t in item.get("Tags") or []}


def _swept(world: OperatorWorld, ns: str, name: str) -> list[str]:
    return [m for _, r, m in world.events(ns, name) if r == "OrphanSwept"]


def _ids(pool: dict[str, Any]) -> list[str]:
    return sorted(str(i["instanceId"]) for i in pool["status"]["instances"])


def test_two_clusters_default_installs_one_account_touch_only_their_own(shared: Shared) -> None:
    a, b = shared.a, shared.b
    ns_a, ns_b = a.namespace(), b.namespace()
    wanted = [
        (a, ns_a, "web", 2),
        (a, ns_a, "batch", 1),
        (b, ns_b, "web", 2),
        (b, ns_b, "batch", 1),
    ]
    for world, ns, name, count in wanted:  # the same names in both clusters
        world.apply(ns, pool_manifest(name, replicas=count))
    for world, ns, name, count in wanted:
        pool = world.wait_ready(ns, name, count)
        key = f"{'a' if world is a else 'b'}/{name}"
        shared.pools[key] = (ns, pool["metadata"]["uid"], _ids(pool))
    cluster_a, cluster_b = cluster_uid(a.kube), cluster_uid(b.kube)
    assert cluster_a != cluster_b

    # Each cluster's own late leak: a deleted pool's instance with its cluster's tags.
    started = time.monotonic()
    leak_a = launch_tagged(a, ns_a, "gone", str(uuid.uuid4()), 0, INSTALL, cluster_a)[1]
    leak_b = launch_tagged(b, ns_b, "gone", str(uuid.uuid4()), 0, INSTALL, cluster_b)[1]
    # What a Retain deletion made before this version left: the install's tag, no cluster tag,
    # no `spotpool-retained` tag, no record.
    kept = launch_tagged(a, ns_a, "kept-before", str(uuid.uuid4()), 0, INSTALL, None)[1]
    shared.before_version = (ns_a, kept)

    def gone(instance_id: str) -> bool:
        state = _ever(a, "spotpool-slot", "0").get(instance_id)
        return state in (None, "GONE", "TERMINATING", "SHUTDOWN")

    for world, leak in ((a, leak_a), (b, leak_b)):
        world.wait_until(partial(gone, leak), f"the leak {leak} swept", timeout=120)
        shared.leak_seconds[leak] = time.monotonic() - started
    _two_more_passes(a, b)

    for key, (_, uid, ids) in shared.pools.items():
        world = a if key[0] == "a" else b
        made = _ever(world, "spotpool-pool-uid", uid)
        assert sorted(made) == ids, f"{key}: launched or lost {made}"  # 0 launched
        assert set(made.values()) == {"RUNNING"}, f"{key}: {made}"  # 0 terminated
    for world, ns, leak in ((a, ns_a, leak_a), (b, ns_b, leak_b)):
        text = world.log.read_text(errors="replace")
        assert f"terminated instance {leak}" in text
        assert text.count("terminated instance ") == 1
        # "gone" was never a pool of this install (its uid made up here, as a tenant could tag
        # its own instances): swept, but no Event in a namespace its tag names (issue 46).
        assert "not a pool this install served, no Event" in text
        assert not _swept(world, ns, "gone")
        assert not _swept(world, ns, "web") and not _swept(world, ns, "batch")
    print(
        f"\ntrue leak swept after (s): { {k: round(v, 1) for k, v in shared.leak_seconds.items()} }"
    )
    for key, (_, _, ids) in shared.pools.items():  # every instance tagged with its cluster
        cluster = cluster_a if key[0] == "a" else cluster_b
        assert all(_tags(a, i).get("spotpool-cluster") == cluster for i in ids)
        assert all(_tags(a, i)["spotpool-install"] == f"{INSTALL}/v2" for i in ids)  # marked


def test_a_retain_made_before_this_version_is_never_swept(shared: Shared) -> None:
    _, kept = shared.before_version
    assert kept, "needs the first test's world"
    _two_more_passes(shared.a)  # long past the grace: it was launched with the leaks
    assert _ever(shared.a, "spotpool-slot", "0")[kept] == "RUNNING"
    text = shared.a.log.read_text(errors="replace")
    assert re.search(rf"left instance {kept} of deleted pool \S+: no spotpool-cluster tag", text)


def test_a_pool_recreated_under_a_new_uid_takes_its_stack_back(shared: Shared) -> None:
    """Operator stopped, the pool deleted with its finalizer stripped and applied again
    (paused), the operator started: its stack still holds the instances, so the sweep leaves
    them past the grace; unpaused, the pool is Ready on them, re-tagged with the new uid."""
    a = shared.a
    ns, old_uid, ids = shared.pools["a/web"]
    a.stop()
    a.kube.ok("-n", ns, "patch", "spotpool", "web", "--type=merge", "-p",
              '{"metadata":{"finalizers":null}}')  # fmt: skip
    a.kube.ok("-n", ns, "delete", "spotpool", "web", "--wait=true")
    a.apply(ns, pool_manifest("web", replicas=2, paused=True))
    new_uid = a.get(ns, "web")["metadata"]["uid"]  # type: ignore[index]
    assert new_uid != old_uid
    a.start()
    time.sleep(GRACE)  # the old uid missing from listings for a whole grace …
    _two_more_passes(a)  # … and two passes after it
    assert _ever(a, "spotpool-pool-uid", old_uid) == dict.fromkeys(ids, "RUNNING")
    assert re.search(r"left instance \S+ of deleted pool \S+: a stack of the state backend holds",
                     a.log.read_text(errors="replace"))  # fmt: skip

    a.apply(ns, pool_manifest("web", replicas=2, paused=False))
    pool = a.wait_ready(ns, "web", 2)
    shared.pools["a/web"] = (ns, new_uid, ids)
    assert _ids(pool) == ids  # the same instances
    assert _ever(a, "spotpool-pool-uid", new_uid) == dict.fromkeys(ids, "RUNNING")  # re-tagged
    assert _ever(a, "spotpool-pool", f"{ns}/web") == dict.fromkeys(ids, "RUNNING")  # 0 launched
    assert not _swept(a, ns, "web")


@pytest.fixture(scope="module")
def rebuilt(shared: Shared) -> Iterator[OperatorWorld]:
    """Cluster B lost (its operator gone for good); cluster C built, the operator installed
    with B's backend (a fresh work dir, as a new pod has), its sweep in report mode: whatever
    it would terminate is an Event, so "0 terminated" is "0 reported" here."""
    shared.b.stop()
    with local_cluster(shared.directory / "c-cluster") as kube_c:
        kube_c.ok("apply", "-f", str(ROOT / CRD_PATH))
        kube_c.ok("wait", "--for=condition=Established", "crd/spotpools.devops.jokerbai.com")
        (shared.directory / "c").mkdir()
        backend = f"file://{shared.directory / 'b' / 'backend'}"
        env = {**ENV, "SPOTPOOL_SWEEP": "report"}  # what would go is only reported here
        # B is gone for good: the admin says so, or B's stacks stay B's (issue 48).
        env["SPOTPOOL_TAKE_OVER_FROM"] = cluster_uid(shared.b.kube)
        c = OperatorWorld(kube_c, shared.a.emulator, shared.directory / "c", env=env,
                          backend_url=backend)  # fmt: skip
        try:
            c.start()
            yield c
        finally:
            c.stop()


def test_a_cluster_rebuilt_against_the_same_backend_takes_its_pools_back(
    shared: Shared, rebuilt: OperatorWorld
) -> None:
    c = rebuilt
    ns, _, _ = shared.pools["b/web"]
    cluster_c = cluster_uid(c.kube)
    c.kube.ok("create", "namespace", ns)  # the same manifests: namespaces, Secrets, pools
    c.kube.ok("-n", ns, "create", "secret", "generic", "tencentcloud",
              f"--from-literal=secretId={c.emulator.secret_id}",
              f"--from-literal=secretKey={c.emulator.secret_key}")  # fmt: skip
    c.kube.ok("-n", ns, "label", "secret", "tencentcloud", f"{CONSENT_KEY}=true")  # opts in
    c.namespaces.append(ns)
    shared.reported = launch_tagged(c, ns, "gone", str(uuid.uuid4()), 0, INSTALL, cluster_c)[1]
    # A restore brings pools back in any order: one resumes at once, one waits (paused).
    c.apply(ns, pool_manifest("batch", replicas=1))
    c.apply(ns, pool_manifest("web", replicas=2, paused=True))
    c.wait_ready(ns, "batch", 1)
    time.sleep(GRACE)
    _two_more_passes(c)
    c.apply(ns, pool_manifest("web", replicas=2, paused=False))
    for name, count in (("batch", 1), ("web", 2)):
        ids = shared.pools[f"b/{name}"][2]
        pool = c.wait_ready(ns, name, count)
        assert _ids(pool) == ids  # every pool Ready on its old instances
        assert _ever(c, "spotpool-pool", f"{ns}/{name}") == dict.fromkeys(ids, "RUNNING")
        assert all(_tags(c, i)["spotpool-cluster"] == cluster_c for i in ids)  # re-tagged
        assert all(_tags(c, i)["spotpool-pool-uid"] == pool["metadata"]["uid"] for i in ids)
    text = c.log.read_text(errors="replace")
    assert "terminated instance " not in text  # 0 terminated
    for name in ("web", "batch"):  # … and none would have been
        assert not [m for _, r, m in c.events(ns, name) if r in ("OrphanFound", "OrphanSwept")]
    # The old uid's instances: the old cluster's (its tag), and held by their stacks besides.
    assert re.search(r"left instance \S+ of deleted pool \S+: made by another cluster", text)


def test_report_mode_reports_a_leak_and_terminates_nothing(
    shared: Shared, rebuilt: OperatorWorld
) -> None:
    """Cluster C's own late leak (launched when C was built, long past the grace now)."""
    c, leak = rebuilt, shared.reported

    def found() -> list[str]:  # the log's: "gone" was never a pool of this install (no Event)
        return re.findall(
            rf"would terminate instance {leak}[^\n]*", c.log.read_text(errors="replace")
        )

    (message,) = c.wait_until(found, "the OrphanFound line", timeout=60)
    assert "not a pool this install served, no Event" in message
    reported = re.search(r"^spotpool_orphans_reported_total (\S+)$", c.metrics(), re.M)
    assert reported and float(reported.group(1)) == 1.0
    _two_more_passes(c)
    assert _ever(c, "spotpool-slot", "0")[leak] == "RUNNING"
    assert found() == [message]  # once, not every pass
    assert "terminated instance " not in c.log.read_text(errors="replace")
    c.stop()  # the next test changes the CRD under it


def _reader_kubeconfig(kube: Kube, namespace: str, into: Path) -> Path:
    """A kubeconfig for a service account that may only get Spotpools in `namespace` (an
    install watching some namespaces: no list across the cluster)."""
    kube.ok("-n", namespace, "create", "serviceaccount", "reader")
    kube.ok("-n", namespace, "create", "role", "reader", "--verb=get",
            "--resource=spotpools.devops.jokerbai.com")  # fmt: skip
    kube.ok("-n", namespace, "create", "rolebinding", "reader", "--role=reader",
            f"--serviceaccount={namespace}:reader")  # fmt: skip
    token = kube.ok("-n", namespace, "create", "token", "reader", "--duration=1h").strip()
    config = yaml.safe_load(kube.kubeconfig.read_text())
    config["users"] = [{"name": config["contexts"][0]["context"]["user"], "user": {"token": token}}]
    into.write_text(yaml.safe_dump(config))
    return into


def test_a_crd_version_change_under_namespaced_rbac_counts_as_everything_alive(
    shared: Shared, rebuilt: OperatorWorld
) -> None:
    from spotpool_operator.reporting.kube import KubeCluster

    c = rebuilt
    ns, _, _ = shared.pools["b/web"]
    uid = c.get(ns, "web")["metadata"]["uid"]  # type: ignore[index]
    reader = KubeCluster(str(_reader_kubeconfig(c.kube, ns, shared.directory / "reader.yaml")))
    candidates = {uid: f"{ns}/web", "u-gone": f"{ns}/gone"}
    assert reader.pool_uids(candidates) == {uid}  # 403 to list, reads: the deleted one is gone

    crd = yaml.safe_load((ROOT / CRD_PATH).read_text())
    (v1,) = crd["spec"]["versions"]
    v2 = {**json.loads(json.dumps(v1)), "name": "v2"}
    crd["spec"]["versions"] = [{**v1, "served": False, "storage": False}, v2]
    c.kube.ok("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump(crd))
    path = f"/apis/devops.jokerbai.com/v1/namespaces/{ns}/spotpools/web"
    c.wait_until(lambda: c.kube.run("get", "--raw", path).returncode != 0, "v1 not served", 60)
    assert reader.pool_uids(candidates) is None  # a 404 for the type: every pool alive


def test_an_api_server_failing_mid_pass_terminates_nothing(shared: Shared) -> None:
    """The sweep itself in this process, on cluster A through a proxy that goes down between
    the fleet listing and the pools' listing; a clock of its own (no waiting for the grace)."""
    from datetime import UTC, datetime, timedelta

    from spotpool_operator.cloud.strays import Backend, StraySweep
    from spotpool_operator.reporting.kube import KubeCluster

    from spotpool.engine.leftovers.holdings import backend_holdings
    from spotpool.engine.tencent import cloud
    from spotpool.engine.tencent.credentials import Credentials
    from tests.operator.fakes import RecordedEvents, run

    a = shared.a
    ns, uid, ids = shared.pools["a/web"]
    install, cluster = "in-process.sweep", cluster_uid(a.kube)  # not the operator's install
    leak = launch_tagged(a, ns, "gone", str(uuid.uuid4()), 0, install, cluster)[1]
    live = launch_tagged(a, ns, "web", uid, 7, install, cluster)[1]  # a live pool's: never
    proxy = StallProxy(*target_of(a.kube.kubeconfig))
    through = KubeCluster(str(proxy.kubeconfig(a.kube.kubeconfig, shared.directory / "via.yaml")))
    direct = KubeCluster(str(a.kube.kubeconfig))
    keys = Credentials(secret_id=SecretStr(a.emulator.secret_id),
                       secret_key=SecretStr(a.emulator.secret_key))  # fmt: skip

    def fleet(credentials: Credentials, region: str) -> list[cloud.FleetInstance]:
        listed = cloud.fleet_instances(cloud.cvm(credentials, region, a.emulator.endpoint))
        if sweep.passes == 0:
            proxy.close()  # the API server goes away mid-pass
        return listed

    now = [datetime.now(UTC)]
    sweep = StraySweep(
        fleet,
        lambda k, r, i, check: cloud.terminate(cloud.cvm(k, r, a.emulator.endpoint), i, check),
        through.pool_uids, lambda u: True, RecordedEvents(), install, GRACE,
        Backend(lambda: backend_holdings(f"file://{a.directory / 'backend'}")),
        cluster_id=cluster, clock=lambda: now[0],
    )  # fmt: skip
    sweep.remember(keys, "ap-singapore")
    try:
        assert run(sweep.sweep()) == []  # the pools' listing failed: everything alive
        now[0] += timedelta(seconds=GRACE)
        sweep.pool_uids = direct.pool_uids  # back
        assert run(sweep.sweep()) == []  # missing from one listing since the failure
        now[0] += timedelta(seconds=GRACE)
        assert [d.instance_id for d in run(sweep.sweep())] == [leak]
        assert live in a.cloud(uid) and set(ids) <= set(a.cloud(uid))  # a live pool's: never
    finally:
        proxy.close()
        for instance in (leak, live):
            cloud.terminate(cloud.cvm(keys, "ap-singapore", a.emulator.endpoint), [instance])
