"""Plain config values written straight into the stack's settings file.

`pulumi config set-all` costs a CLI process (~0.3 CPU-s) for what is, when no secret changes,
an edit of Pulumi.<stack>.yaml: the targeted replacement only moves a slot's nonce.
"""

from collections.abc import Mapping
from pathlib import Path

import yaml
from pulumi import automation as auto


def write_plain(stack: auto.Stack, values: Mapping[str, str]) -> bool:
    """Set `values` (none of them secret) in the stack's settings file, keeping every other
    entry; False when the file is not one this can edit safely (the caller uses the CLI)."""
    workspace = stack.workspace
    if not isinstance(workspace, auto.LocalWorkspace):
        return False
    short_name = stack.name.split("/")[-1]
    path = Path(workspace.work_dir) / f"Pulumi.{short_name}.yaml"
    try:
        settings = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return False
    if not isinstance(settings, dict) or not isinstance(settings.get("config"), dict):
        return False
    config: dict[str, object] = settings["config"]
    if any(not isinstance(config.get(key, ""), str) for key in values):
        return False  # a secret or structured entry of that name: not ours to overwrite
    config.update(values)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(yaml.safe_dump(settings, sort_keys=True))
    temporary.replace(path)
    return True
