"""The engine's Pulumi runs use Pulumi's plugins but write none of Pulumi's automatic debug
logs (up to 500 MB of unencrypted files in the operator's home, listed at every CLI start)."""

from pathlib import Path

import pytest

from spotpool.toolchain.paths import pulumi_home
from tests.engine._support.fast_launch import PASSWORD, pool_stack, storm_config
from tests.engine.conftest import EngineWorld

pytestmark = pytest.mark.integration


def test_an_up_runs_with_the_shared_plugins_and_leaves_no_debug_log(
    world: EngineWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "pulumi-home"
    shared.mkdir()
    (shared / "plugins").symlink_to(pulumi_home() / "plugins")
    monkeypatch.setenv("PULUMI_HOME", str(shared))
    pool = pool_stack(world, "quiet")
    pool.up(storm_config(world, pool, 1), login_password=PASSWORD)
    assert len(world.cloud_instances(pool)) == 1  # the plugin ran: the instance is there
    home = world.settings.work_root / ".pulumi-home"
    assert (home / "plugins").resolve() == (shared / "plugins").resolve()
    assert (home / "logs").is_file()
    assert not (shared / "logs").exists() and not list(home.glob("**/*.log"))
