"""The preview backend: a copy of every pool's stack with each secret value replaced by a
placeholder, so the pull-request job — which runs the pull request's own code — can read the
copy with its own passphrase and still find no production secret in it (login passwords, user
data with its notice tokens, notice keys).

The copy needs no production passphrase either: each stack's checkpoint is read from the
backend's files with its secrets still encrypted, every secret (`{<sig>: <secret sig>,
"ciphertext": ...}`) is swapped for a placeholder in plain text, and the import encrypts the
placeholders with the preview stack's own key.
Previews of the copy keep the state's placeholders for secret inputs whose fingerprint did not
change (see `keep_secret_inputs` of `PoolStack.preview`), so an unchanged pool still previews as
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
from spotpool.engine.runs.stack_workspace import pulumi_command
from spotpool.engine.state.backend_files import ROOT, BackendFiles, latest_deployment, open_backend
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
    `source` no longer has are removed (their pools were deleted). The source's files are only
    read — checkpoints and tags, straight from the backend, so its passphrase is never needed
    (the CLI would ask for it to deserialize even an export that shows no secret). Returns the
    stacks copied."""
    files = open_backend(source, source_env)
    if files is None:
        raise ValueError(f"{source}: only file:// and s3:// backends can be copied")
    folder = f"{ROOT}/stacks/{PROJECT}/"
    names = sorted(
        {
            short
            for key in files.keys(folder)
            if key.endswith((".json", ".json.gz"))
            and "." in (short := key[len(folder) :].removesuffix(".gz").removesuffix(".json"))
            and "/" not in short
        }
    )
    copied: list[str] = []
    with tempfile.TemporaryDirectory(prefix="spotpool-copy-") as tmp:
        env = {"PULUMI_CONFIG_PASSPHRASE": target_passphrase, **(target_env or {})}
        dst = _workspace(tmp, target, env)
        present = {s.name.rsplit("/", 1)[-1] for s in dst.list_stacks()}
        for name in names:
            deployment = latest_deployment(files, PROJECT, name)
            if deployment is None:
                progress(f"skipped {name}: no checkpoint to read")
                continue
            dst.select_stack(name) if name in present else dst.create_stack(name)
            salt = yaml.safe_load((Path(tmp) / f"Pulumi.{name}.yaml").read_text())["encryptionsalt"]
            state = redact(deployment)
            state["secrets_providers"] = {"type": "passphrase", "state": {"salt": salt}}
            dst.import_stack(name, auto.Deployment(version=3, deployment=state))
            for key, value in _tags(files, name).items():
                dst.set_tag(name, key, value)
            progress(f"copied {name}")
            copied.append(name)
        for gone in sorted(present - set(names)):
            if "." in gone:
                dst.remove_stack(gone)
                progress(f"removed {gone} (no longer in the source)")
    return copied


def _tags(files: BackendFiles, stack: str) -> dict[str, str]:
    """The stack's `spotpool:` tags (namespace, name, uid), from its DIY tags file."""
    try:
        tags = json.loads(files.read(f"{ROOT}/stacks/{PROJECT}/{stack}.pulumi-tags"))["tags"]
    except Exception:  # no tags file: a stack from before tags
        return {}
    return {str(k): str(v) for k, v in tags.items() if str(k).startswith("spotpool:")}
