"""The environment of a Pulumi CLI process: only what it needs, never all of the operator's.

The Automation API hands every CLI the whole environment of the process that starts it: the
operator's web-identity token file, its VAULT_TOKEN, every backend's keys, its own cloud keys.
A run gets instead:

- the machine's basics from the process (PATH, HOME, locale, temporary directory, CA bundles,
  outbound proxies) and Pulumi's own settings (`PULUMI_*`, but no passphrase or access token);
- the backend's credentials from the process only for the backend this run uses (AWS_* for an
  unfenced `s3://`, GOOGLE_* for `gs://`, AZURE_* for `azblob://`, PULUMI_ACCESS_TOKEN for
  Pulumi Cloud); a fenced `s3://` run has its own placeholder keys and no real ones;
- the run's own variables (stack_workspace.pulumi_env, run_fence.admitted), of which the
  secrets provider's only for the provider the stack uses: the passphrase (or its file) for a
  passphrase stack, the key service's VAULT_ADDR/VAULT_TOKEN for a keyserver stack.
"""

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

_BASICS = re.compile(
    r"^(PATH|HOME|USER|LOGNAME|SHELL|LANG|LANGUAGE|LC_[A-Z_]+|TZ|TMPDIR|TMP|TEMP|TERM"
    r"|SSL_CERT_FILE|SSL_CERT_DIR|HTTPS?_PROXY|https?_proxy|NO_PROXY|no_proxy|ALL_PROXY"
    r"|XDG_[A-Z_]+|GOGC|GOMEMLIMIT|GOMAXPROCS|GODEBUG|VIRTUAL_ENV|PYTHONPATH|PYTHONHOME)$"
)
_NEVER_FROM_PROCESS = frozenset(
    {"PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE", "PULUMI_ACCESS_TOKEN"}
)
_BACKEND_KEYS = {
    "s3://": re.compile(r"^AWS_[A-Z0-9_]+$"),
    "gs://": re.compile(r"^(GOOGLE_[A-Z0-9_]+|CLOUDSDK_[A-Z0-9_]+)$"),
    "azblob://": re.compile(r"^AZURE_[A-Z0-9_]+$"),
    "https://": re.compile(r"^PULUMI_ACCESS_TOKEN$"),
}
_PASSPHRASE = ("PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE")
_KEY_SERVICE = ("VAULT_ADDR", "VAULT_TOKEN")
KEYSERVER_URL = "hashivault://spotpool"  # engine/state/keyserver.py URL (no import upwards)


def child_environment(
    run_env: Mapping[str, str],
    backend: str,
    args: Sequence[str],
    cwd: str,
    process_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of one CLI run of `args` in `cwd` on `backend`."""
    ambient = os.environ if process_env is None else process_env
    env = {
        k: v
        for k, v in ambient.items()
        if _BASICS.match(k) or (k.startswith("PULUMI_") and k not in _NEVER_FROM_PROCESS)
    }
    fenced = run_env.get("AWS_ACCESS_KEY_ID", "").startswith("SPOTPOOLRUN")
    for scheme, names in _BACKEND_KEYS.items():
        if backend.startswith(scheme) and not (scheme == "s3://" and fenced):
            env.update({k: v for k, v in ambient.items() if names.match(k)})
    env.update(run_env)
    provider = _secrets_provider(args, cwd)
    if provider == "keyserver":
        for name in _PASSPHRASE:
            env.pop(name, None)
    elif provider == "passphrase":
        for name in _KEY_SERVICE:
            env.pop(name, None)
    if env.get("PULUMI_CONFIG_PASSPHRASE_FILE"):
        env.pop("PULUMI_CONFIG_PASSPHRASE", None)  # the file serves it
    return {k: v for k, v in env.items() if v != ""}  # "": dropped (a token the run has not)


def _secrets_provider(args: Sequence[str], cwd: str) -> str | None:
    """`passphrase` or `keyserver` as the run's stack settings file says; None when the run
    names no stack, or the file does not say (a stack being made: both are given)."""
    stack = _stack_of(args)
    if stack is None:
        return None
    path = Path(cwd) / f"Pulumi.{stack.split('/')[-1]}.yaml"
    try:
        settings = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(settings, dict):
        return None
    if settings.get("secretsprovider") == KEYSERVER_URL:
        return "keyserver"
    if settings.get("encryptionsalt") and not settings.get("secretsprovider"):
        return "passphrase"
    return None


def _stack_of(args: Sequence[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg in ("--stack", "-s") and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--stack="):
            return arg.split("=", 1)[1]
    return None
