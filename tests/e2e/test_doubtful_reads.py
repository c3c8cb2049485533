"""Nothing is taken on an empty or doubtful read, nor by a rolled-back release (issue 48, builds
3-5), on the local world: a pool made by the operator (the real engine, emulator and
kube-apiserver), then re-created under a new uid and paused with the operator stopped — the
case in which its old instances are held by nothing but its stack. The sweep then runs in this
process (a clock of its own: no waiting for the grace) against that backend read as the cases
say: Pulumi's older flat layout, a `file://~/…?query` URL, a directory the operator's user
cannot list, a wrong S3 prefix after a restore. Each keeps every instance; the doubtful ones
are reported with their reason (Events OrphanFound and SweepReportsOnly). The previous
release's sweep (install tag alone) finds none of this release's instances. A
TerminateInstances failing mid-pass leaves the batch sent before it audited."""

import gzip
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from spotpool.api.stackconfig import PoolIdentity, install_tag
from spotpool.cluster import s3
from spotpool.engine.leftovers.holdings import Holdings, backend_holdings
from spotpool.engine.leftovers.install_marker import mark_install
from spotpool.engine.leftovers.orphans import Decision
from spotpool.engine.state.backend_files import open_backend
from spotpool.engine.tencent import cloud
from spotpool.engine.tencent.credentials import Credentials
from spotpool.localworld.kube import Kube
from tests.e2e._support.operator_runs import INSTALL_LEASE, cluster_uid, launch_tagged
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
INSTALL = f"default.{INSTALL_LEASE}"
GRACE = 60.0  # the in-process sweep's: its clock is moved, never waited for
LEASE = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
         "metadata": {"namespace": "default", "name": INSTALL_LEASE}}  # fmt: skip


@dataclass
class Recreated:
    world: OperatorWorld
    ns: str
    old_uid: str
    ids: list[str]  # what the old pool's stack holds
    backend: Path


@pytest.fixture(scope="module")
def recreated(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recreated]:
    with operator_world(kube, tmp_path_factory.mktemp("doubtful")) as world:
        ns = world.namespace()
        world.apply(ns, pool_manifest("web", replicas=2))
        pool = world.wait_ready(ns, "web", 2)
        ids = sorted(i["instanceId"] for i in pool["status"]["instances"])
        world.stop()  # its own sweep stays out of it; the pool re-created while it is down
        world.kube.ok("-n", ns, "patch", "spotpool", "web", "--type=merge", "-p",
                      '{"metadata":{"finalizers":null}}')  # fmt: skip
        world.kube.ok("-n", ns, "delete", "spotpool", "web", "--wait=true")
        world.apply(ns, pool_manifest("web", replicas=2, paused=True))
        yield Recreated(world, ns, pool["metadata"]["uid"], ids, world.directory / "backend")


def _sweep(r: Recreated, holdings: Callable[[], Holdings | None]) -> list[Decision]:
    """Two passes a grace apart (the clock moved), as the operator's sweep runs them, posting
    its Events to the API server: what the second decided to terminate or report."""
    from spotpool_operator.cloud.strays import Backend, StraySweep
    from spotpool_operator.reporting.events import DirectEvents
    from spotpool_operator.reporting.kube import KubeCluster

    kube = KubeCluster(str(r.world.kube.kubeconfig))
    endpoint = r.world.emulator.endpoint
    now = [datetime.now(UTC)]
    sweep = StraySweep(
        lambda k, region: cloud.fleet_instances(cloud.cvm(k, region, endpoint)),
        lambda k, region, ids, check: cloud.terminate(cloud.cvm(k, region, endpoint), ids, check),
        kube.pool_uids, lambda uid: True, DirectEvents(kube.core()), INSTALL, GRACE,
        Backend(holdings), cluster_id=cluster_uid(r.world.kube), clock=lambda: now[0],
        pool_names=kube.pool_names, install_object=LEASE,
    )  # fmt: skip
    sweep.remember(_keys(r.world), "ap-singapore", pool=PoolIdentity(namespace=r.ns, name="web",
                                                                   uid=r.old_uid))  # fmt: skip
    from tests.operator.fakes import run

    run(sweep.sweep())
    now[0] += timedelta(seconds=GRACE)
    return list(run(sweep.sweep()))


def _keys(world: OperatorWorld) -> Credentials:
    return Credentials(secret_id=SecretStr(world.emulator.secret_id),
                       secret_key=SecretStr(world.emulator.secret_key))  # fmt: skip


def _kept(r: Recreated, decisions: list[Decision]) -> list[str]:
    """Every instance of the old pool still running; the reasons of what was reported."""
    assert sorted(r.world.cloud(r.old_uid)) == r.ids, decisions
    assert {d.action for d in decisions} <= {"report"}, decisions
    reasons = sorted({d.reason for d in decisions})
    print("\nreported:", reasons)
    return reasons


def test_an_instance_of_this_release_survives_the_previous_releases_sweep(
    recreated: Recreated,
) -> None:
    """The release before the cluster tag swept on the install tag alone (git 0290ed7^,
    strays.py: `item.install == self.install_id`, its pool missing): its pass over the account
    now, the old pool's uid gone."""
    from spotpool_operator.reporting.kube import KubeCluster

    r = recreated
    client = cloud.cvm(_keys(r.world), "ap-singapore", r.world.emulator.endpoint)
    found = cloud.fleet_instances(client)
    candidates = {i.pool_uid: i.pool for i in found if i.install == INSTALL and i.pool_uid}
    alive = KubeCluster(str(r.world.kube.kubeconfig)).pool_uids(candidates) or set(candidates)
    going = [i.instance_id for i in found if i.install == INSTALL and i.pool_uid not in alive]
    if going:
        cloud.terminate(client, going)
    assert going == [] and sorted(r.world.cloud(r.old_uid)) == r.ids
    assert {i.install for i in found if i.pool_uid == r.old_uid} == {install_tag(INSTALL)}


def test_pulumis_older_flat_layout_is_read_in_full(recreated: Recreated, tmp_path: Path) -> None:
    """The stacks straight under .pulumi/stacks and no meta.yaml (what `pulumi` writes with
    PULUMI_SELF_MANAGED_STATE_LEGACY_LAYOUT, and wrote before project mode)."""
    r = recreated
    flat = tmp_path / "flat"
    shutil.copytree(r.backend / ".spotpool", flat / ".spotpool")
    (flat / ".pulumi" / "stacks").mkdir(parents=True)
    for found in (r.backend / ".pulumi" / "stacks" / "spotpool").glob("*.json*"):
        if found.name.endswith((".json", ".json.gz")):
            raw = found.read_bytes()
            plain = gzip.decompress(raw) if found.name.endswith(".gz") else raw
            name = found.name.removesuffix(".gz")
            (flat / ".pulumi" / "stacks" / name).write_bytes(plain)
    assert _kept(r, _sweep(r, lambda: backend_holdings(f"file://{flat}", INSTALL))) == []


def test_a_file_url_with_a_tilde_and_a_query_is_read_where_pulumi_reads_it(
    recreated: Recreated,
) -> None:
    r = recreated
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    link = home / f".spotpool-e2e-{uuid.uuid4().hex[:8]}"
    link.symlink_to(r.backend)
    try:
        url = f"file://~/{link.name}?no_tmp_dir=true"
        assert _kept(r, _sweep(r, lambda: backend_holdings(url, INSTALL))) == []
    finally:
        link.unlink()


def test_a_directory_the_operator_cannot_list_is_reported_not_taken(
    recreated: Recreated,
) -> None:
    """The operator as a user the stacks' directory denies (root lists every directory)."""
    r = recreated
    shared = Path(tempfile.mkdtemp(prefix="spotpool-unreadable-"))
    try:
        shared.chmod(0o755)
        shutil.copytree(r.backend, shared / "backend")
        for folder, dirs, _ in os.walk(shared / "backend"):
            for name in dirs:
                (Path(folder) / name).chmod(0o755)
        (shared / "backend" / ".pulumi" / "stacks" / "spotpool").chmod(0o700)
        reasons = _kept(r, _sweep(r, partial_read_as_nobody(f"file://{shared / 'backend'}")))
        assert reasons and all("PermissionError" in reason for reason in reasons)
        assert _reported(r, "PermissionError")
    finally:
        shutil.rmtree(shared)


def partial_read_as_nobody(url: str) -> Callable[[], Holdings | None]:
    code = (
        "import json, sys\n"
        "from spotpool.engine.leftovers.holdings import backend_holdings\n"
        "h = backend_holdings(sys.argv[1])\n"
        "print(json.dumps(None if h is None else {'instances': sorted(h.instances), "
        "'kept': sorted(h.kept), 'doubt': getattr(h, 'doubt', None)}))\n"
    )

    def read() -> Holdings | None:
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
             "-c", code, url],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        found = json.loads(done.stdout)
        if found is None:
            return None
        return Holdings(frozenset(found["instances"]), frozenset(found["kept"]),
                        doubt=found["doubt"])  # fmt: skip

    return read


def test_a_wrong_prefix_after_a_restore_is_reported_not_taken(
    recreated: Recreated, s3_server: s3.LocalS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backend restored under `restored/`, the operator pointed at `spotpool/`: it writes
    its install marker there at start (a first start, as far as that prefix can tell)."""
    r = recreated
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    right = s3_server.backend_url.replace("s3://spotpool-state?", "s3://spotpool-state/restored?")
    wrong = s3_server.backend_url.replace("s3://spotpool-state?", "s3://spotpool-state/spotpool?")
    files, source = open_backend(right), open_backend(f"file://{r.backend}")
    assert files is not None and source is not None
    for key in source.keys(".pulumi/stacks/") + source.keys(".spotpool/"):
        files.write(key, source.read(key))
    mark_install(wrong, INSTALL, cluster_uid(r.world.kube))  # the operator's start
    reasons = _kept(r, _sweep(r, lambda: backend_holdings(wrong, INSTALL)))
    assert reasons and all("exists again (under a new uid)" in m for m in reasons)
    assert _reported(r, "found no stack of it")


def _reported(r: Recreated, why: str) -> bool:
    """The deleted pool's OrphanFound Events and the install's SweepReportsOnly say why."""
    found = [m for _, reason, m in r.world.events(r.ns, "web") if reason == "OrphanFound"]
    install = json.loads(r.world.kube.ok(
        "-n", "default", "get", "events", "-o", "json", "--field-selector",
        f"involvedObject.name={INSTALL_LEASE},reason=SweepReportsOnly",
    ))["items"]  # fmt: skip
    print("OrphanFound:", found[-1:], "SweepReportsOnly:", [e["message"] for e in install][-1:])
    return any(why in m for m in found) and any(why in e["message"] for e in install)


def test_a_termination_failing_mid_pass_leaves_the_sent_batch_audited(
    recreated: Recreated,
) -> None:
    """Two deleted pools' leaks (one batch each); the cloud fails TerminateInstances once the
    first batch is answered: that batch has its Event, log line and count all the same."""
    from spotpool_operator.cloud.strays import Backend, StraySweep
    from spotpool_operator.reporting.events import DirectEvents
    from spotpool_operator.reporting.kube import KubeCluster

    from tests.operator.fakes import run

    r, world = recreated, recreated.world
    cluster = cluster_uid(world.kube)
    uids = sorted(str(uuid.uuid4()) for _ in range(2))
    leaks = [launch_tagged(world, r.ns, f"gone-{n}", uid, 0, install_tag(INSTALL), cluster)[1]
             for n, uid in enumerate(uids)]  # fmt: skip
    kube = KubeCluster(str(world.kube.kubeconfig))
    endpoint = world.emulator.endpoint
    sent: list[list[str]] = []

    def terminate(keys: Credentials, region: str, ids: list[str], check: Any) -> None:
        cloud.terminate(cloud.cvm(keys, region, endpoint), ids, check)
        sent.append(ids)  # answered: the cloud fails every later call
        fault = {"Action": "TerminateInstances", "Code": "InternalError"}
        world.emulator.admin_ok("POST", "/_emulator/faults", fault)

    swept: list[int] = []
    now = [datetime.now(UTC)]
    sweep = StraySweep(
        lambda k, region: cloud.fleet_instances(cloud.cvm(k, region, endpoint)), terminate,
        kube.pool_uids, lambda uid: True, DirectEvents(kube.core()), INSTALL, GRACE,
        Backend(lambda: backend_holdings(f"file://{r.backend}", INSTALL)),
        cluster_id=cluster, clock=lambda: now[0], on_swept=swept.append,
    )  # fmt: skip
    for n, uid in enumerate(uids):
        sweep.remember(_keys(world), "ap-singapore",
                       pool=PoolIdentity(namespace=r.ns, name=f"gone-{n}", uid=uid))  # fmt: skip
    try:
        run(sweep.sweep())
        now[0] += timedelta(seconds=GRACE)
        run(sweep.sweep())  # the failure is the account's: logged, the pass ends
    finally:
        world.emulator.admin_ok("DELETE", "/_emulator/faults")
    assert sent == [[leaks[0]]] and swept == [1] and sweep.swept == 1
    assert leaks[0] not in world.cloud(uids[0]) and leaks[1] in world.cloud(uids[1])
    (event,) = [m for _, reason, m in world.events(r.ns, "gone-0") if reason == "OrphanSwept"]
    assert leaks[0] in event
    assert world.events(r.ns, "gone-1") == []  # its call failed: no Event, the next pass
    cloud.terminate(cloud.cvm(_keys(world), "ap-singapore", endpoint), [leaks[1]])
