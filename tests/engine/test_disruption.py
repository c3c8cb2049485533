"""Bounded voluntary disruption, for real: a user-data change (ForceNew: it replaces every
instance) of a pool of 6 rolled out with maxUnavailable 2 and maxSurge 0 — three batches of
two slots, each a targeted Pulumi run, the do-not-disrupt slot in the last one, and never more
than 6 instances in the cloud at any moment (the emulator's request log, replayed in order)."""

import base64
import json
import threading
from typing import Any

import pytest
from tencentcloud.cvm.v20170312 import models

from spotpool.engine.stacks.rollout import roll_out
from spotpool.engine.tencent import cloud
from spotpool.preview.manifests import Manifest
from spotpool.preview.report import to_text
from spotpool.preview.run import preview_manifests
from tests.engine.conftest import REGION, EngineWorld, pool_spec

pytestmark = pytest.mark.integration
V1 = "#!/bin/sh\necho v1\n"
V2 = "#!/bin/sh\necho v2\n"


def _user_data(world: EngineWorld, instance_ids: list[str]) -> dict[str, str]:
    client = cloud.cvm(world.credentials, REGION, world.emulator.endpoint)
    request = models.DescribeInstancesAttributesRequest()
    request.from_json_string(json.dumps({"InstanceIds": instance_ids, "Attributes": ["UserData"]}))
    reply = client.DescribeInstancesAttributes(request)
    return {
        item.InstanceId: base64.b64decode(item.Attributes.UserData).decode()
        for item in reply.InstanceSet
    }


def _peak_from_log(world: EngineWorld, since: int) -> int:
    """Most instances alive at once, replaying the RunInstances / TerminateInstances calls the
    emulator received (in arrival order) from the pool's count before the rollout."""
    calls: list[dict[str, Any]] = world.emulator.admin_ok("GET", "/_emulator/requests")["Requests"]
    alive = peak = since
    terminated: set[str] = set()
    for call in sorted(calls, key=lambda c: c["Time"]):
        if call["Code"] != "OK":
            continue
        if call["Action"] == "RunInstances":
            alive += int(call["Params"].get("InstanceCount", 1))
        elif call["Action"] == "TerminateInstances":
            ids = set(call["Params"].get("InstanceIds") or []) - terminated
            terminated |= ids
            alive -= len(ids)
        peak = max(peak, alive)
    return peak


def test_user_data_change_rolls_out_in_three_batches(world: EngineWorld) -> None:
    stack = world.pool()
    first = {i.slot: i.instance_id for i in stack.up(world.config(stack, 6, userData=V1)).instances}
    assert len(first) == 6
    before = world.emulator.admin_ok("GET", "/_emulator/requests?action=RunInstances")["Requests"]
    assert sum(int(c["Params"].get("InstanceCount", 1)) for c in before if c["Code"] == "OK") == 6

    # `spotpool preview` of the change says how many batches it takes.
    spec = pool_spec(6, userData=V2, disruption={"maxUnavailable": 2, "maxSurge": 0})
    manifest = Manifest(
        file="gpu.yaml", namespace=stack.pool.namespace, name=stack.pool.name, spec=spec,
        do_not_disrupt=frozenset({1}),
    )  # fmt: skip
    (previewed,) = preview_manifests([manifest], world.settings, world.credentials)
    assert previewed.error is None and previewed.stack == stack.name
    assert previewed.replaced_slots == [0, 1, 2, 3, 4, 5] and previewed.batches == 3
    assert "replaced in 3 batch(es)" in to_text([previewed])
    assert set(world.cloud_instances(stack)) == set(first.values())  # the preview left them

    # A sampler beside the log: live pool instances, as often as the emulator answers.
    sampled: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            sampled.append(len(world.cloud_instances(stack)))
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    after_batch: list[dict[int, str]] = []
    try:
        rollout = roll_out(
            stack,
            world.config(stack, 6, userData=V2),
            max_unavailable=2,
            max_surge=0,
            protected={1},  # devops.jokerbai.com/do-not-disrupt: "1"
            on_batch=lambda _n, _b, r: after_batch.append(
                {i.slot: i.instance_id for i in r.instances}
            ),
        )
    finally:
        done.set()
        sampler.join(timeout=5)

    assert rollout.replaced == [0, 1, 2, 3, 4, 5]
    assert [b.slots for b in rollout.batches] == [[0, 2], [3, 4], [1, 5]]  # slot 1 last
    assert len(rollout.results) == 3
    # After each batch, exactly its slots (and the earlier batches') have a new instance.
    changed = [{s for s in first if ids[s] != first[s]} for ids in after_batch]
    assert changed == [{0, 2}, {0, 2, 3, 4}, {0, 1, 2, 3, 4, 5}]
    final = after_batch[-1]
    assert set(world.cloud_instances(stack)) == set(final.values())
    assert set(_user_data(world, list(final.values())).values()) == {V2}
    # Never more than count + maxSurge = 6 instances: the log replayed, and the sampler.
    assert _peak_from_log(world, since=0) == 6
    assert sampled and max(sampled) <= 6
    # The rollout is done: a plain up now changes nothing.
    again = stack.up(world.config(stack, 6, userData=V2))
    assert again.changes.create == again.changes.delete == again.changes.replace == 0


def test_surge_and_unavailable_in_one_batch(world: EngineWorld) -> None:
    """maxUnavailable 1 and maxSurge 1 on a pool of 4: two batches of two slots, in each one
    slot replaced create-before-delete and one delete-first, so never more than 5 instances."""
    stack = world.pool()
    first = {i.slot: i.instance_id for i in stack.up(world.config(stack, 4, userData=V1)).instances}
    rollout = roll_out(stack, world.config(stack, 4, userData=V2), max_unavailable=1, max_surge=1)
    assert [(b.surge, b.delete_first) for b in rollout.batches] == [((0,), (1,)), ((2,), (3,))]
    final = {i.slot: i.instance_id for i in rollout.results[-1].instances}
    assert set(final) == {0, 1, 2, 3} and not set(final.values()) & set(first.values())
    assert set(_user_data(world, list(final.values())).values()) == {V2}
    assert _peak_from_log(world, since=0) == 5  # count + maxSurge, reached by each surge
