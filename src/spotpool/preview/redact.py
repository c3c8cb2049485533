"""The preview backend: a copy of every pool's stack with each secret value replaced by a
placeholder, so the pull-request job — which runs the pull request's own code — can read the
copy with its own passphrase and still find no production secret in it (login passwords, user
data with its notice tokens, notice keys).

The copy needs no production passphrase either: a stack is exported with its secrets still
encrypted, every secret (`{<sig>: <secret sig>, "ciphertext": ...}`) is swapped for a placeholder
in plain text, and the import encrypts the placeholders with the preview stack's own key.
Previews of the copy keep the state's placeholders for secret inputs whose fingerprint did not
change (see `keep_secret_inputs` in engine/stack.py), so an unchanged pool still previews as
unchanged.
"""

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pulumi import automation as auto

from spotpool.api.stackconfig import PROJECT
from spotpool.engine.stack import pulumi_command
from spotpool.toolchain.paths import bin_dir

SECRET_SIG_KEY = "4dabf18193072939515e22adb298388d"  # Pulumi's marker of a secret value
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
PLACEHOLDER = "[secret: not copied to the preview backend]"


def redact(value: Any) -> Any:
    """The value with every secret inside it replaced by the placeholder (as plain text, for the
    import to encrypt)."""
    if isinstance(value, dict):
        if value.get(SECRET_SIG_KEY) == SECRET_SIG:
            return {SECRET_SIG_KEY: SECRET_SIG, "plaintext": json.dumps(PLACEHOLDER)}
        return {key: redact(item) for key, item in value.items()}
    if isinstance(value, list):
        return [redact(item) for item in value]
    return value


def _workspace(work_dir: str, backend: str, env: dict[str, str]) -> auto.LocalWorkspace:
    return auto.LocalWorkspace(
        work_dir=work_dir,
        pulumi_command=pulumi_command(_tools_root()),
        env_vars={"PULUMI_SKIP_UPDATE_CHECK": "true", **env},
        project_settings=auto.ProjectSettings(
            name=PROJECT, runtime="python", backend=auto.ProjectBackend(url=backend)
        ),
    )


def _tools_root() -> Path:
    return bin_dir().parent  # the toolchain's cache (pulumi CLI and plugins)


def copy_redacted(
    source: str,
    target: str,
    target_passphrase: str,
    source_env: dict[str, str] | None = None,
    target_env: dict[str, str] | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> list[str]:
    """Copy every pool stack (`<namespace>.<name>`) of `source` into `target`, secrets replaced
    by placeholders and the copy encrypted with `target_passphrase`. Stacks in `target` that
    `source` no longer has are removed (their pools were deleted). The source is only read; its
    passphrase is never needed. Returns the stacks copied."""
    copied: list[str] = []
    with tempfile.TemporaryDirectory(prefix="spotpool-copy-") as tmp:
        # A wrong passphrase on purpose: exporting without --show-secrets decrypts nothing.
        src = _workspace(f"{tmp}", source, {"PULUMI_CONFIG_PASSPHRASE": "-", **(source_env or {})})
        dst_dir = Path(tmp) / "target"
        dst_dir.mkdir()
        target_env = {"PULUMI_CONFIG_PASSPHRASE": target_passphrase, **(target_env or {})}
        dst = _workspace(str(dst_dir), target, target_env)
        names = sorted(
            short
            for summary in src.list_stacks()
            if "." in (short := summary.name.rsplit("/", 1)[-1])
        )
        for name in names:
            deployment = src.export_stack(name)
            tags = src.list_tags(name)
            dst.select_stack(name) if _exists(dst, name) else dst.create_stack(name)
            salt = yaml.safe_load((dst_dir / f"Pulumi.{name}.yaml").read_text())["encryptionsalt"]
            state = redact(deployment.deployment)
            state["secrets_providers"] = {"type": "passphrase", "state": {"salt": salt}}
            dst.import_stack(name, auto.Deployment(version=deployment.version, deployment=state))
            for key, value in tags.items():
                if key.startswith("spotpool:"):
                    dst.set_tag(name, key, value)
            progress(f"copied {name}")
            copied.append(name)
        for summary in dst.list_stacks():
            short = summary.name.rsplit("/", 1)[-1]
            if "." in short and short not in names:
                dst.remove_stack(short)
                progress(f"removed {short} (no longer in the source)")
    return copied


def _exists(workspace: auto.LocalWorkspace, name: str) -> bool:
    return any(s.name.rsplit("/", 1)[-1] == name for s in workspace.list_stacks())
