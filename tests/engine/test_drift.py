"""Drift found by a full refresh, for real: the pinned Pulumi engine and tencentcloud provider
against the emulator, the instance changed the way a person changes it in the console (the
cloud API: ModifyInstancesAttribute, ModifyResourceTags, StopInstances)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tencentcloud.cvm.v20170312 import models

from spotpool.engine.runs.stack_workspace import select_stack
from spotpool.engine.state.drift import drift_in
from spotpool.engine.state.stack_state import state_of
from spotpool.preview import report
from spotpool.preview.run import preview_stacks
from tests.emulator.harness import wait_until
from tests.engine.conftest import REGION, EngineWorld

pytestmark = pytest.mark.integration

GROUPS = ["sg-11111111"]


def console_edit(world: EngineWorld, instance_id: str) -> None:
    """Rename, move to another security group, tag and stop the instance, as in the console."""
    cvm = world.emulator.cvm(region=REGION)
    # One attribute a request, as the API takes them.
    for attribute in ({"InstanceName": "by-hand"}, {"SecurityGroups": ["sg-2"]}):
        modify = models.ModifyInstancesAttributeRequest()
        modify.from_json_string(json.dumps({"InstanceIds": [instance_id], **attribute}))
        cvm.ModifyInstancesAttribute(modify)
    world.emulator.common("tag", "2018-08-13", region=REGION).call_json(
        "ModifyResourceTags",
        {
            "Resource": f"qcs::cvm:{REGION}:uin/:instance/{instance_id}",
            "ReplaceTags": [{"TagKey": "owner", "TagValue": "bob"}],
        },
    )
    stop = models.StopInstancesRequest()
    stop.from_json_string(json.dumps({"InstanceIds": [instance_id]}))
    cvm.StopInstances(stop)


def described(world: EngineWorld, instance_id: str) -> dict:  # type: ignore[type-arg]
    (found,) = [i for i in world.emulator.all_instances() if i["InstanceId"] == instance_id]
    return found


def shown_by_cli(world: EngineWorld, stack_name: str, edited: str) -> None:
    """`spotpool stacks show` tells the drift from the backend alone (no cloud keys)."""
    env = {
        **os.environ,
        "SPOTPOOL_BACKEND_URL": world.settings.backend_url,
        "SPOTPOOL_WORK_DIR": str(world.settings.work_root),
        "PULUMI_CONFIG_PASSPHRASE": "engine-tests-passphrase",
    }
    spotpool = str(Path(sys.executable).parent / "spotpool")
    shown = subprocess.run(
        [spotpool, "stacks", "show", stack_name], env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    (drift,) = json.loads(shown.stdout)["drift"]
    assert drift["instanceId"] == edited
    assert {"field": "instanceName", "desired": "team-a-gpu-1", "actual": "by-hand"} in (
        drift["fields"]
    )


def shown_by_pr_preview(world: EngineWorld, edited: str) -> None:
    """The PR preview lists the drift beside the change (its up would restore it)."""
    (preview,) = preview_stacks(world.settings, world.credentials)
    assert [d.instance_id for d in preview.drift] == [edited]
    markdown = report.to_markdown([preview])
    assert f"| 1 | `{edited}` | `instanceName` | `team-a-gpu-1` | `by-hand` |" in markdown
    assert f"| 1 | `{edited}` | `running` | `RUNNING` | `STOPPED` |" in markdown
    assert preview.instances is not None and preview.instances.update == 1  # what the up does


def test_refresh_reports_console_edits_until_an_up_restores_them(world: EngineWorld) -> None:
    stack = world.pool()
    config = world.config(stack, 2, securityGroupIds=GROUPS)
    first = stack.up(config)
    assert stack.refresh().drift == []  # nothing changed: nothing reported
    edited = first.instances[1].instance_id
    console_edit(world, edited)
    wait_until(lambda: described(world, edited)["InstanceState"] == "STOPPED", "the stop", 30)

    found = stack.refresh()
    assert [(d.slot, d.instance_id) for d in found.drift] == [(1, edited)]
    fields = {f.field: (f.desired, f.actual) for f in found.drift[0].fields}
    assert fields == {
        "instanceName": ("team-a-gpu-1", "by-hand"),
        "securityGroups": ("sg-11111111", "sg-2"),
        "tags.owner": (None, "bob"),
        "running": ("RUNNING", "STOPPED"),
    }
    # The refresh wrote the name and groups it read into the state's inputs: a second one
    # must still see the drift (Report leaves it as found; the condition stays).
    assert stack.refresh().drift == found.drift
    assert drift_in(state_of(select_stack(stack))) == found.drift
    shown_by_cli(world, stack.name, edited)
    shown_by_pr_preview(world, edited)

    stack.up(config)  # Correct: the up restores the instance in place (restarted, not replaced)
    after = described(world, edited)
    assert after["InstanceName"] == "team-a-gpu-1"
    assert after["SecurityGroupIds"] == GROUPS
    assert after["InstanceState"] == "RUNNING"
    assert "owner" not in {t["Key"] for t in after["Tags"]}
    assert sorted(world.cloud_instances(stack)) == sorted(i.instance_id for i in first.instances)
    assert stack.refresh().drift == []
