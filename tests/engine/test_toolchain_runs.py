"""The built Pulumi CLI and tencentcloud plugin really run (issue 2's proof, engine side)."""

import os
import subprocess
from pathlib import Path

import pulumi
import pytest
from pulumi import automation as auto

from spotpool.toolchain.paths import bin_dir
from tests.conftest import require_tool

pytestmark = pytest.mark.integration


def test_a_program_without_cloud_resources_goes_up_and_is_destroyed(tmp_path: Path) -> None:
    require_tool("pulumi")
    (tmp_path / "backend").mkdir()

    def program() -> None:
        pulumi.export("greeting", "hello from the built engine")

    stack = auto.create_stack(
        "smoke",
        project_name="smoke",
        program=program,
        opts=auto.LocalWorkspaceOptions(
            work_dir=str(tmp_path),
            pulumi_command=auto.PulumiCommand(root=str(bin_dir().parent)),
            env_vars={"PULUMI_CONFIG_PASSPHRASE": "smoke", "PULUMI_SKIP_UPDATE_CHECK": "true"},
            project_settings=auto.ProjectSettings(
                name="smoke",
                runtime="python",
                backend=auto.ProjectBackend(url=f"file://{tmp_path / 'backend'}"),
            ),
        ),
    )
    up = stack.up()
    assert up.outputs["greeting"].value == "hello from the built engine"
    assert up.summary.result == "succeeded"
    assert stack.destroy().summary.result == "succeeded"
    stack.workspace.remove_stack("smoke")


def test_the_tencentcloud_plugin_is_registered_and_answers() -> None:
    plugin = require_tool("pulumi-resource-tencentcloud")
    cli = require_tool("pulumi")
    env = {**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"}
    listed = subprocess.run(
        [str(cli), "plugin", "ls"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert any(
        line.split()[:3] == ["tencentcloud", "resource", "0.2.3"] for line in listed.splitlines()
    )
    version = subprocess.run([str(plugin), "-version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == "0.2.3"


def test_the_cli_starts_without_the_password_dictionaries_and_still_spots_secrets(
    tmp_path: Path,
) -> None:
    """zxcvbn is swapped for our estimate (0.18 CPU-s of package init in every CLI process);
    `config set` still refuses a plaintext value that looks like a secret."""
    cli = require_tool("pulumi")
    env = {
        **os.environ,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_CONFIG_PASSPHRASE": "smoke",
        "PULUMI_BACKEND_URL": f"file://{tmp_path}",
    }
    inits = subprocess.run(
        [str(cli), "version"],
        env={**env, "GODEBUG": "inittrace=1"},
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    assert "init github.com/pulumi/pulumi" in inits and "zxcvbn" not in inits
    (tmp_path / "Pulumi.yaml").write_text("name: smoke\nruntime: python\n")
    subprocess.run(
        [str(cli), "stack", "init", "dev"], cwd=tmp_path, env=env, check=True, capture_output=True
    )

    def config_set(value: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(cli), "config", "set", "dbPassword", value],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )

    refused = config_set("x8#Kq2!vLp9@Zr4$Wm7tQ")
    assert refused.returncode != 0 and "looks like a secret" in refused.stderr
    assert config_set("hello").returncode == 0
