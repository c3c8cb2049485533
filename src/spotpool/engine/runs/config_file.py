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

from spotpool.engine.basics.settings import EngineSettings
from spotpool.engine.state import config_crypt, keyserver


def settings_path(work_dir: Path | str, stack_name: str) -> Path:
    return Path(work_dir) / f"Pulumi.{stack_name.split('/')[-1]}.yaml"


def is_stale(path: Path, passphrase: str) -> bool:
    """Whether the settings file at `path` holds a secrets key this passphrase does not open:
    left by a run with another passphrase (another world, another backend, a by-hand try),
    it would only make the CLI fail with `incorrect passphrase`. A file without a key of its
    own, or one that is not readable as settings, is not judged here."""
    try:
        settings = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return False
    if not isinstance(settings, dict) or not any(
        settings.get(k) for k in ("encryptionsalt", "encryptedkey")
    ):
        return False
    return _secrets_key(settings, passphrase) is None


def drop_if_stale(path: Path, passphrase: str) -> bool:
    """Remove the settings file at `path` when `is_stale`; True when it did."""
    if path.exists() and is_stale(path, passphrase):
        path.unlink(missing_ok=True)
        return True
    return False


def prepare_new_stack(path: Path, settings: EngineSettings) -> dict[str, object]:
    """Before a stack the backend does not hold is made (`path` does not exist yet): a
    settings file with the process's salt or wrapped data key (the CLI keeps one it finds).
    Returns the checkpoint's `secrets_providers` for that key."""
    passphrase = settings.passphrase.get_secret_value()
    if settings.secrets_provider == "keyserver":
        key = keyserver.process_key(passphrase)
        body: dict[str, object] = {"secretsprovider": keyserver.URL, "encryptedkey": key}
        secrets: dict[str, object] = {
            "type": "cloud", "state": {"url": keyserver.URL, "encryptedkey": key}
        }  # fmt: skip
    else:
        salt = config_crypt.process_salt(passphrase)
        body = {"encryptionsalt": salt}
        secrets = {"type": "passphrase", "state": {"salt": salt}}
    _replace(path, {**body, "config": {}})
    return secrets


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
        if (key := _secrets_key(settings, passphrase)) is None:
            return False  # the CLI says what is wrong
        config.update({k: {"secure": config_crypt.encrypt(key, v)} for k, v in secrets.items()})
    config.update(plain)
    _replace(path, settings)
    return True


def _secrets_key(settings: dict[str, object], passphrase: str) -> bytes | None:
    """The key the file's secrets are under, if this passphrase opens it here."""
    salt, provider, wrapped = (
        settings.get(k) for k in ("encryptionsalt", "secretsprovider", "encryptedkey")
    )
    try:
        if isinstance(salt, str) and not provider:
            return config_crypt.key_for(salt, passphrase)
        if provider == keyserver.URL and isinstance(wrapped, str):
            return keyserver.data_key(passphrase, wrapped)
    except (ValueError, config_crypt.WrongPassphrase, keyserver.WrongKey):
        pass
    return None  # another provider's file, or not this passphrase's


def _replace(path: Path, body: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(yaml.safe_dump(body, sort_keys=True))
    temporary.replace(path)
