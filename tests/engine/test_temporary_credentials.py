"""Temporary credentials in a real Pulumi run: a pool's `up` through a role of account B,
assumed with account A's keys, whose keys live a few seconds only (the emulator's cap). The run
outlives them several times over and not one call fails: the API proxy re-signs each call with
the identity's live keys, renewed by the shared cache at two thirds of their life."""

import time
import uuid
from collections.abc import Iterator

import pytest

from spotpool.api.identity import AssumeRole
from spotpool.api.stackconfig import PoolIdentity
from spotpool.engine.stacks.stack import PoolStack
from spotpool.engine.tencent.identities import CredentialCache
from tests.engine.conftest import EngineWorld
from tests.sts_world import ACCOUNT_A, ACCOUNT_B, ROLE_B, configure, role

pytestmark = pytest.mark.integration
LIFE_SECONDS = 4  # every key the emulator hands out dies this long after it was issued
INSTANCES = 4


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[CredentialCache]:
    """A cache of this test's own, as the process's one (the API proxy asks it)."""
    fresh = CredentialCache()
    monkeypatch.setattr("spotpool.engine.tencent.identities.CREDENTIALS", fresh)
    monkeypatch.setattr("spotpool.engine.tencent.api_proxy.CREDENTIALS", fresh)
    yield fresh


def test_an_up_longer_than_its_keys_life_never_fails_and_lands_in_the_roles_account(
    world: EngineWorld, cache: CredentialCache
) -> None:
    configure(
        world.emulator,
        Roles=[role(trusted_accounts=[ACCOUNT_A])],
        MaxLifetimeSeconds=LIFE_SECONDS,
    )
    assumed = cache.role(world.credentials, AssumeRole(role_arn=ROLE_B), world.emulator.endpoint)
    assert assumed.account == ACCOUNT_B and assumed.temporary
    # Each RunInstances answers after two key lives: the run's later calls (its reads of the
    # new instances) come after the keys it started with have died.
    world.emulator.admin_ok(
        "POST",
        "/_emulator/faults",
        {"Action": "RunInstances", "Rate": 0, "LatencyMs": 2 * LIFE_SECONDS * 1000},
    )
    pool = PoolIdentity(namespace="team-b", name="gpu", uid=str(uuid.uuid4()))
    stack = PoolStack(pool, world.settings, assumed, "ap-singapore", world.progress.append)

    started = time.monotonic()
    result = stack.up(world.config(stack, INSTANCES))
    seconds = time.monotonic() - started

    assert len(result.instances) == INSTANCES
    assert seconds > 2 * LIFE_SECONDS, f"the up took {seconds:.1f} s: it outlived no key"
    assert cache.fetches >= 2  # renewed during the run
    calls = world.emulator.admin_ok("GET", "/_emulator/requests")["Requests"]
    failed = [(c["Action"], c["Code"]) for c in calls if c["Code"] != "OK"]
    assert failed == [], f"calls failed: {failed}"
    mine = [
        i
        for i in world.emulator.all_instances()
        if {"Key": "spotpool-pool-uid", "Value": pool.uid} in (i.get("Tags") or [])
    ]
    assert len(mine) == INSTANCES
    assert {i["Account"] for i in mine} == {ACCOUNT_B}  # none in account A
    print(f"up {seconds:.1f} s with keys living {LIFE_SECONDS} s; {cache.fetches} STS calls")
