"""Write a pool's stack config and tags before a run: the StackConfig, the engine's own keys
(install and cluster ids, surges, promotions, notice nonces) and the secrets (notice key,
login password, user data), skipping the CLI runs when this process already set exactly
these values."""

import hashlib
import json
from collections.abc import Mapping

from pulumi import automation as auto

from spotpool.api.stackconfig import PROJECT, USER_DATA_FINGERPRINT, StackConfig
from spotpool.engine.basics.errors import EngineError
from spotpool.engine.basics.stack_view import WorkspaceStack
from spotpool.engine.fencing.processes import FencedCommand
from spotpool.engine.runs import config_file
from spotpool.engine.runs.known_stacks import known_stack

NONCES_KEY = f"{PROJECT}:noticeNonces"


def write_config(
    pool: WorkspaceStack,
    stack: auto.Stack,
    config: StackConfig,
    password: str | None,
    tag: bool = True,
    surge: list[int] | None = None,
    promote: list[int] | None = None,
    nonces: Mapping[str, str] | None = None,
) -> None:
    """Set the stack's config and tags, skipping the CLI runs when this process already set
    exactly these values. `surge`: slots with a surge instance; `promote`: slots whose
    surge instance takes the slot's name in this run (see the stack program). `tag=False`:
    a throwaway stack (a preview's) this process neither tags nor remembers."""
    settings = pool.settings
    plain = {
        **config.to_pulumi_config(),
        f"{PROJECT}:installId": settings.install_id,
        f"{PROJECT}:clusterId": settings.cluster_id or "",
        f"{PROJECT}:surge": json.dumps(sorted(surge or [])),
        f"{PROJECT}:promote": json.dumps(sorted(promote or [])),
        # Each instance's generation (notice_nonces.py): not secret, the token is.
        NONCES_KEY: json.dumps(dict(sorted((nonces or {}).items()))),
    }
    values = {key: auto.ConfigValue(value) for key, value in plain.items()}
    if config.notice_agent is not None:
        key = settings.notice_key(pool.pool.uid)
        values[f"{PROJECT}:noticeKey"] = auto.ConfigValue(key, secret=True)
        plain = {**plain, f"{PROJECT}:noticeKey": _fingerprint(key)}
    if password is not None:
        values[f"{PROJECT}:loginPassword"] = auto.ConfigValue(password, secret=True)
        plain = {**plain, f"{PROJECT}:loginPassword": _fingerprint(password)}
    if config.user_data and not config.user_data.startswith(USER_DATA_FINGERPRINT):
        values[f"{PROJECT}:userData"] = auto.ConfigValue(config.user_data, secret=True)
        plain = {**plain, f"{PROJECT}:userData": _fingerprint(config.user_data)}
    known = known_stack(pool) if tag else None
    if known is None or known.config != plain:
        secret = {key for key, value in values.items() if value.secret}
        previous = known.config if known else None  # what this process last set
        same_secrets = bool(previous) and all(
            previous is not None and previous.get(key) == plain[key] for key in secret
        )
        unsecret = {key: value for key, value in plain.items() if key not in secret}
        secrets = {} if same_secrets else {key: values[key].value for key in secret}
        passphrase = settings.passphrase.get_secret_value()
        if not config_file.write(stack, unsecret, secrets, passphrase):
            set_through_cli(stack, values)
        if known is not None:
            known.config = plain
    if known is None or known.tagged:
        return
    wanted = {
        "spotpool:namespace": pool.pool.namespace,
        "spotpool:name": pool.pool.name,
        "spotpool:uid": pool.pool.uid,
    }
    if not known.stack.ensure_tags(wanted):  # not a self-managed backend: the CLI
        current = {} if known.stack.created else stack.list_tags()
        for key, value in wanted.items():
            if current.get(key) != value:
                stack.set_tag(key, value)
    known.tagged = True


def set_through_cli(stack: auto.Stack, values: Mapping[str, auto.ConfigValue]) -> None:
    """Set config with the CLI when the settings file is not one this can edit: the plain
    values with `config set-all`, each secret with `config set --secret KEY`, its value on the
    CLI's stdin — never on a command line, which any process of the host can read."""
    plain = {key: value for key, value in values.items() if not value.secret}
    if plain:
        stack.set_all_config(plain)
    workspace = stack.workspace
    command = getattr(workspace, "pulumi_command", None)
    if not isinstance(command, FencedCommand) or not isinstance(workspace, auto.LocalWorkspace):
        raise EngineError(f"cannot set the secret config of stack {stack.name} safely")
    for key, value in values.items():
        if value.secret:
            args = ["config", "set", "--secret", "--stack", stack.name, key]
            command.run_with_input(args, workspace.work_dir, workspace.env_vars, value.value)


def nonces_last_set(config: Mapping[str, str] | None) -> dict[str, str]:
    """The instances' generations this process last set in the stack's config (a
    `KnownStack.config`)."""
    raw = (config or {}).get(NONCES_KEY) or "{}"
    return {str(k): str(v) for k, v in json.loads(raw).items()}


def _fingerprint(secret: str) -> str:
    """Stands for a secret in the remembered config: equal secrets, equal fingerprints."""
    return hashlib.sha256(secret.encode()).hexdigest()
