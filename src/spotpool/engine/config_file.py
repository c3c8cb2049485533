"""A stack's config written straight into its settings file (Pulumi.<stack>.yaml).

`pulumi config set-all` costs a CLI process (~0.35 CPU-s: its start and the passphrase key)
for what is an edit of that file: plain values as they are, secrets encrypted as the
passphrase provider does (config_crypt.py). A new stack's file is written before the CLI
creates the stack, carrying the process's salt, so its first `up` is the only CLI run after
the create.
"""

from collections.abc import Mapping
from pathlib import Path

import yaml
from pulumi import automation as auto

from spotpool.engine import config_crypt


def settings_path(work_dir: Path | str, stack_name: str) -> Path:
    return Path(work_dir) / f"Pulumi.{stack_name.split('/')[-1]}.yaml"


def prepare_new_stack(path: Path, passphrase: str) -> None:
    """Before `stack select --create` of a stack the backend does not hold: a settings file
    with the process's salt (the CLI keeps a salt it finds)."""
    if path.exists():
        return
    body: dict[str, object] = {
        "encryptionsalt": config_crypt.process_salt(passphrase),
        "config": {},
    }
    _replace(path, body)


def write(
    stack: auto.Stack, plain: Mapping[str, str], secrets: Mapping[str, str], passphrase: str
) -> bool:
    """Set `plain` and `secrets` in the stack's settings file, keeping every other entry;
    False when the file is not one this can edit safely (the caller runs the CLI)."""
    workspace = stack.workspace
    if not isinstance(workspace, auto.LocalWorkspace):
        return False
    path = settings_path(workspace.work_dir, stack.name)
    try:
        settings = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return False
    if not isinstance(settings, dict):
        return False
    config = settings.setdefault("config", {})
    if not isinstance(config, dict):
        return False
    if any(not isinstance(config.get(key, ""), str) for key in plain):
        return False  # a secret or structured entry of that name: not ours to overwrite
    if secrets:
        salt = settings.get("encryptionsalt")
        if not isinstance(salt, str) or settings.get("secretsprovider"):
            return False  # not the passphrase provider's file
        try:
            key = config_crypt.key_for(salt, passphrase)
        except (ValueError, config_crypt.WrongPassphrase):
            return False  # the CLI says what is wrong
        config.update({k: {"secure": config_crypt.encrypt(key, v)} for k, v in secrets.items()})
    config.update(plain)
    _replace(path, settings)
    return True


def _replace(path: Path, body: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(yaml.safe_dump(body, sort_keys=True))
    temporary.replace(path)
