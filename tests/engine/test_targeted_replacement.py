"""The operator's reclaim path without the fast path (`replace_slots`), for real: one Pulumi
CLI process (the `up`; the new slot's nonce is written into the stack's settings file, not
by a `config set-all` run), and afterwards the stack is what a plain `pulumi preview` expects."""

from pathlib import Path

import pytest
import yaml

from spotpool.localworld.emulator import wait_until
from tests.engine._support.fast_launch import (
    PASSWORD,
    pool_instances,
    pool_stack,
    preview_expecting_no_changes,
    storm_config,
)
from tests.engine.conftest import EngineWorld, count_cli_runs

pytestmark = pytest.mark.integration


def test_a_targeted_replacement_is_one_cli_run_and_previews_no_change(
    world: EngineWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = pool_stack(world)
    config = storm_config(world, stack, 2)
    first = {i.slot: i.instance_id for i in stack.up(config, login_password=PASSWORD).instances}
    settings_file = world.settings.work_root / stack.name / f"Pulumi.{stack.name}.yaml"
    secure_before = {
        k: v for k, v in yaml.safe_load(settings_file.read_text())["config"].items()
        if isinstance(v, dict)
    }  # fmt: skip
    world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [first[1]]})
    wait_until(lambda: first[1] not in pool_instances(world, stack), "the reclaim", timeout=30)

    commands = count_cli_runs(monkeypatch)
    replaced = stack.replace_slots(config, [1], login_password=PASSWORD)
    monkeypatch.undo()

    assert commands == ["up"]
    after = {i.slot: i.instance_id for i in replaced.instances}
    assert after[0] == first[0] and after[1] != first[1]
    assert sorted(pool_instances(world, stack)) == sorted(after.values())
    written = yaml.safe_load(settings_file.read_text())["config"]
    assert {k: v for k, v in written.items() if isinstance(v, dict)} == secure_before
    assert PASSWORD not in settings_file.read_text()
    preview_expecting_no_changes(world, stack, tmp_path)
