"""A new pool's stack is made without the CLI once the backend is set up: its first Pulumi
process is the `up` itself. On S3 the keys are in the process's environment (as in a pod),
where Pulumi's runs find them; the stack is then an ordinary one to the plain CLI."""

import json

import pytest

from tests.engine._support.fast_launch import pool_stack
from tests.engine.conftest import EngineWorld, count_cli_runs

pytestmark = pytest.mark.integration


def test_a_new_stack_on_s3_costs_no_cli_run_before_its_up(
    s3_world: EngineWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = pool_stack(s3_world, "first")
    first.up(s3_world.config(first, 1))  # the CLI sets the backend up (its meta.yaml)

    commands = count_cli_runs(monkeypatch)
    second = pool_stack(s3_world, "second")
    made = second.up(s3_world.config(second, 1))

    assert commands == ["up"]  # (undoing the count would undo the fixture's S3 keys too)
    assert len(made.instances) == 1
    listed = json.loads(s3_world.pulumi(second, "stack", "ls", "--json"))
    assert {s["name"] for s in listed} >= {first.name, second.name}
    assert len(s3_world.cloud_instances(second)) == 1
