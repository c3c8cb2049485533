"""Run the install program inline through the Automation API, with the pinned Pulumi CLI.

Inline means no Python language host is needed; the kubernetes resource plugin
(pulumi-resource-kubernetes) still is, as for any pulumi-kubernetes program.
"""

import os
from pathlib import Path

from pulumi import automation as auto

from spotpool.toolchain.paths import bin_dir
from spotpool_deploy.program import PROJECT, Install, declare


def install_stack(
    stack_name: str,
    install: Install,
    state_url: str,
    work_dir: Path,
    kubeconfig: Path | None = None,
) -> auto.Stack:
    """The install's stack (created on first use) in the `state_url` backend."""
    work_dir.mkdir(parents=True, exist_ok=True)
    if state_url.startswith("file://"):
        Path(state_url.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
    env = {
        "PULUMI_CONFIG_PASSPHRASE": os.environ.get("PULUMI_CONFIG_PASSPHRASE", ""),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DIY_BACKEND_NO_LEGACY_WARNING": "true",
    }
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    options = auto.LocalWorkspaceOptions(
        work_dir=str(work_dir),
        pulumi_command=auto.PulumiCommand(root=str(bin_dir().parent)),
        env_vars=env,
        secrets_provider="passphrase",
        project_settings=auto.ProjectSettings(
            name=PROJECT, runtime="python", backend=auto.ProjectBackend(url=state_url)
        ),
    )

    def program() -> None:
        declare(install)

    return auto.create_or_select_stack(
        stack_name, project_name=PROJECT, program=program, opts=options
    )
