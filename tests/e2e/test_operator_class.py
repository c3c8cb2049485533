"""Two installs side by side in one namespace (spec.operatorClass), which a SpotpoolAccessPolicy
lets both serve (operatorClasses): each converges only the pools of its class, and neither
touches the other's pools, finalizers, status or instances.

Two `spotpool operator run` processes (classes blue and green, install ids and Leases of
their own) on the real kube-apiserver, one emulator as the cloud, one shared file backend (a
pool moved from one class to the other is the same stack)."""

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest

from spotpool.api.stackconfig import TAG_INSTALL
from spotpool.localworld.emulator import EmulatorProcess, start_emulator
from spotpool.localworld.kube import Kube
from tests.conftest import require_tool
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
FINALIZER = "devops.jokerbai.com/finalizer"


@dataclass
class Installs:
    blue: OperatorWorld
    green: OperatorWorld
    emulator: EmulatorProcess
    ns: str

    def pool(self, name: str) -> dict[str, Any]:
        pool = self.blue.get(self.ns, name)
        assert pool is not None, f"{self.ns}/{name} is gone"
        return pool

    def installs_of(self, uid: str) -> set[str]:
        """The install tag of each live instance of the pool."""
        live = set(self.blue.cloud(uid))
        return {
            tag["Value"]
            for item in self.emulator.all_instances()
            if item["InstanceId"] in live
            for tag in item.get("Tags") or []
            if tag["Key"] == TAG_INSTALL
        }


@pytest.fixture(scope="module")
def installs(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installs]:
    require_tool("pulumi")
    require_tool("pulumi-resource-tencentcloud")
    base = tmp_path_factory.mktemp("classes")
    (base / "backend").mkdir()
    emulator = start_emulator(base / "cloud.db", base / "emulator.log")
    worlds = []
    try:
        for name in ("blue", "green"):
            (base / name).mkdir()
            world = OperatorWorld(
                kube, emulator, base / name,
                backend_url=f"file://{base / 'backend'}",
                namespace_prefix="oc-",
                env={
                    "SPOTPOOL_OPERATOR_CLASS": name,
                    "SPOTPOOL_INSTALL_ID": f"{name}-install",
                    "SPOTPOOL_LEASE_NAME": f"spotpool-{name}",
                },
            )  # fmt: skip
            worlds.append(world)
            world.start()
        blue, green = worlds
        namespace = blue.namespace()
        # Only the install with no class may serve a namespace no policy grants another to.
        policy = {"apiVersion": "devops.jokerbai.com/v1", "kind": "SpotpoolAccessPolicy",
                  "metadata": {"name": f"e2e-{namespace}"},
                  "spec": {"namespaces": {"names": [namespace]},
                           "operatorClasses": ["blue", "green"]}}  # fmt: skip
        kube.ok("apply", "-f", "-", stdin=json.dumps(policy))
        yield Installs(blue, green, emulator, namespace)
    finally:
        for world in worlds:
            world.stop()
        for world in worlds:
            world.release_namespaces()
            for namespace in world.namespaces:
                kube.run("delete", "spotpoolaccesspolicy", f"e2e-{namespace}", "--wait=false")
        emulator.stop()


def _logged(world: OperatorWorld, text: str) -> bool:
    return text in world.log.read_text(errors="replace")


def _handled(log: str) -> str:
    """An install's log without its lines saying a pool of another class is left alone."""
    return "\n".join(line for line in log.splitlines() if "left to its install" not in line)


def _table(text: str) -> dict[str, dict[str, str]]:
    """`kubectl get` output as name -> column -> cell (an empty cell prints as blanks)."""
    header, *rows = text.splitlines()
    found = list(re.finditer(r"\S+", header))
    names, starts = [m.group() for m in found], [m.start() for m in found]
    ends: list[int | None] = [*starts[1:], None]
    table = {}
    for row in rows:
        cells = {n: row[a:b].strip() for n, a, b in zip(names, starts, ends, strict=True)}
        table[cells["NAME"]] = cells
    return table


def test_each_install_converges_only_the_pools_of_its_class(installs: Installs) -> None:
    blue, green, ns = installs.blue, installs.green, installs.ns
    started = time.monotonic()
    blue.apply(ns, pool_manifest("blue-pool", replicas=1, operatorClass="blue"))
    green.apply(ns, pool_manifest("green-pool", replicas=2, operatorClass="green"))
    blue.apply(ns, pool_manifest("plain", replicas=1))  # no class: neither install's

    blue.wait_ready(ns, "blue-pool", 1)
    green.wait_ready(ns, "green-pool", 2)
    print(f"both pools Ready in {time.monotonic() - started:.0f} s")
    # Each install has seen the other pools and logged its decision to leave them alone.
    for world, others in ((blue, ("green-pool", "plain")), (green, ("blue-pool", "plain"))):
        for name in others:
            said = f"pool {ns}/{name} is of"
            world.wait_until(partial(_logged, world, said), f"{name} left alone", 60)

    by_pool = {name: installs.pool(name) for name in ("blue-pool", "green-pool", "plain")}
    assert by_pool["blue-pool"]["metadata"]["finalizers"] == [f"{FINALIZER}-blue"]
    assert by_pool["green-pool"]["metadata"]["finalizers"] == [f"{FINALIZER}-green"]
    assert not by_pool["plain"]["metadata"].get("finalizers")
    assert not by_pool["plain"].get("status")  # nobody wrote a status
    annotations = by_pool["plain"]["metadata"].get("annotations") or {}
    assert not [key for key in annotations if key.startswith("devops.jokerbai.com/")]

    uid = {name: pool["metadata"]["uid"] for name, pool in by_pool.items()}
    assert len(blue.cloud(uid["blue-pool"])) == 1
    assert len(blue.cloud(uid["green-pool"])) == 2
    assert blue.cloud(uid["plain"]) == {}
    assert installs.installs_of(uid["blue-pool"]) == {"blue-install/v2"}
    assert installs.installs_of(uid["green-pool"]) == {"green-install/v2"}

    # Each install's log, Events and metrics name only its own pool.
    blue_log, green_log = (_handled(w.log.read_text(errors="replace")) for w in (blue, green))
    assert f"{ns}/blue-pool" in blue_log and f"{ns}/green-pool" in green_log
    assert f"{ns}/green-pool" not in blue_log and f"{ns}/plain" not in blue_log
    assert f"{ns}/blue-pool" not in green_log and f"{ns}/plain" not in green_log
    assert 'pool="blue-pool"' in blue.metrics() and 'pool="green-pool"' not in blue.metrics()
    assert 'pool="green-pool"' in green.metrics() and 'pool="blue-pool"' not in green.metrics()
    assert blue.events(ns, "plain") == []

    table = _table(blue.kube.ok("-n", ns, "get", "spotpools", "-o", "wide"))
    assert list(table["green-pool"])[:7] == [
        "NAME", "DESIRED", "READY", "PHASE", "REASON", "ON-DEMAND", "AGE",
    ]  # fmt: skip
    assert table["blue-pool"]["CLASS"] == "blue" and table["plain"]["CLASS"] == ""
    shown = [table["green-pool"][c] for c in ("DESIRED", "READY", "PHASE", "REASON", "ON-DEMAND")]
    assert shown == ["2", "2", "Ready", "Converged", "0"]
    assert table["plain"]["PHASE"] == table["plain"]["REASON"] == ""


def test_a_pool_moved_to_the_other_class_changes_hands_and_is_re_tagged(
    installs: Installs,
) -> None:
    blue, green, ns = installs.blue, installs.green, installs.ns
    before = installs.pool("blue-pool")
    uid = before["metadata"]["uid"]
    instances = set(blue.cloud(uid))
    patch = {"spec": {"operatorClass": "green"}}
    blue.kube.ok(
        "-n", ns, "patch", "spotpool", "blue-pool", "--type=merge", "-p", json.dumps(patch)
    )

    def handed_over() -> dict[str, Any] | None:
        pool = installs.pool("blue-pool")
        status = pool.get("status") or {}
        moved = pool["metadata"].get("finalizers") == [f"{FINALIZER}-green"]
        observed = status.get("observedGeneration") == pool["metadata"]["generation"]
        return pool if moved and observed and status.get("phase") == "Ready" else None

    pool = green.wait_until(handed_over, "green to take blue-pool over", timeout=120)
    assert set(blue.cloud(uid)) == instances  # the same instances: no replacement
    ups = [line for line in green.log.read_text().splitlines() if f"{ns}/blue-pool" in line]
    assert ups, "green never handled the pool"
    # One up re-tags them with green's install (issue 48): its sweep and a Retain find them.
    green.wait_until(lambda: installs.installs_of(uid) == {"green-install/v2"}, "re-tagged", 120)
    assert set(blue.cloud(uid)) == instances  # in place: no replacement
    conditions = {c["type"]: c["status"] for c in pool["status"]["conditions"]}
    assert conditions["Ready"] == "True" and conditions["Reconciling"] == "False"
    # Blue's daemon for it stopped, and blue forgot the pool (no metrics, no watch).
    blue.wait_until(lambda: 'pool="blue-pool"' not in blue.metrics(), "blue to forget it", 30)

    # Green now writes the stack: a scale goes through, and blue stays out of it.
    mark = len(blue.log.read_text(errors="replace"))
    scale = {"spec": {"replicas": 2}}
    blue.kube.ok(
        "-n", ns, "patch", "spotpool", "blue-pool", "--type=merge", "-p", json.dumps(scale)
    )
    green.wait_ready(ns, "blue-pool", 2)
    assert len(blue.cloud(uid)) == 2
    assert "green-install/v2" in installs.installs_of(uid)
    assert f"{ns}/blue-pool" not in _handled(blue.log.read_text(errors="replace")[mark:])


def test_deleting_leaves_the_other_installs_pools_alone(installs: Installs) -> None:
    blue, green, ns = installs.blue, installs.green, installs.ns
    uids = {name: installs.pool(name)["metadata"]["uid"] for name in ("blue-pool", "plain")}
    green_pool = installs.pool("green-pool")
    blue.kube.ok("-n", ns, "delete", "spotpool", "plain", "--wait=true", "--timeout=30s")
    green.kube.ok("-n", ns, "delete", "spotpool", "blue-pool", "--wait=true", "--timeout=180s")
    assert blue.cloud(uids["blue-pool"]) == {}  # green destroyed the moved pool's stack
    # The deletions are over (--wait): the handlers they woke have finished.
    after = installs.pool("green-pool")
    assert after["metadata"]["finalizers"] == [f"{FINALIZER}-green"]
    assert len(blue.cloud(green_pool["metadata"]["uid"])) == 2
    assert after["status"]["observedGeneration"] == green_pool["status"]["observedGeneration"]
