"""Temporary keys that live half a minute (the emulator's cap), under an operator whose every `up`
and reclaim storm takes longer than that (instances boot for longer than a key lives): every
call of the operator's SDK, its fast path, its fleet probe and its Pulumi runs is signed with
live keys, so not one is refused."""

import json
from collections.abc import Iterator

import pytest

from spotpool.localworld.kube import Kube
from spotpool.localworld.operator import OperatorWorld, pool_manifest
from tests.e2e.conftest import operator_world
from tests.sts_world import ACCOUNT_A, ACCOUNT_B, ROLE_B, configure, role

# Not `heavy`: one operator and four instances, waiting most of its time for instances that boot
# for longer than a key lives (little CPU); it runs beside the heavy lane, handed out first.
pytestmark = pytest.mark.e2e
LIFE_SECONDS = 30  # renewed at two thirds of it: ten seconds to spare
BOOT_SECONDS = LIFE_SECONDS + 10  # an up waits for RUNNING: every up outlives a key


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorWorld]:
    directory = tmp_path_factory.mktemp("lifetime")
    with operator_world(kube, directory, boot_seconds=BOOT_SECONDS) as operator:
        configure(
            operator.emulator,
            Roles=[role(trusted_accounts=[ACCOUNT_A])],
            MaxLifetimeSeconds=LIFE_SECONDS,
        )
        yield operator


def test_an_up_and_a_storm_longer_than_a_keys_life_without_one_refused_call(
    world: OperatorWorld,
) -> None:
    namespace = world.namespace()
    name = f"e2e-lifetime-{namespace}"
    policy: dict[str, object] = {
        "apiVersion": "devops.jokerbai.com/v1",
        "kind": "SpotpoolAccessPolicy",
        "metadata": {"name": name},
        "spec": {
            "namespaces": {"names": [namespace]},
            "roles": [ROLE_B],
            "launch": {"images": ["img-*"], "vpcs": ["DEFAULT"], "subnets": ["DEFAULT"]},
        },
    }
    world.kube.ok("apply", "-f", "-", stdin=json.dumps(policy))  # the namespace may use ROLE_B
    try:
        _storm(world, namespace)
    finally:
        world.kube.run("delete", "spotpoolaccesspolicy", name)


def _storm(world: OperatorWorld, namespace: str) -> None:
    names = ["gpu-a", "gpu-b"]
    for name in names:
        world.apply(namespace, pool_manifest(name, minimum=2, assumeRole={"roleArn": ROLE_B}))
    pools = [world.wait_ready(namespace, n, 2, timeout=BOOT_SECONDS * 5) for n in names]

    victims = [i["instanceId"] for p in pools for i in p["status"]["instances"]]
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": victims})

    def replaced() -> bool:
        for name in names:
            status = world.status(namespace, name)
            ids = {i["instanceId"] for i in status.get("instances") or []}
            if status.get("readyReplicas") != 2 or ids & set(victims):
                return False
        return True

    world.wait_until(replaced, "every reclaimed instance replaced", timeout=BOOT_SECONDS * 5)
    calls = world.emulator.admin_ok("GET", "/_emulator/requests")["Requests"]
    refused = [(c["Action"], c["Code"]) for c in calls if c["Code"].startswith("AuthFailure")]
    assert refused == []
    assumed = [c for c in calls if c["Action"] == "AssumeRole"]
    first, last = min(c["Time"] for c in calls), max(c["Time"] for c in calls)
    assert last - first > 2 * LIFE_SECONDS, "the operator's work outlived no key"
    assert len(assumed) >= 3  # the keys were renewed, more than once, while it worked
    launched_in = {i["Account"] for i in world.emulator.all_instances()}
    assert launched_in == {ACCOUNT_B}
