"""Open a pool's Pulumi stack: the pinned CLI, the stack's work directory and Automation API
workspace, and the environment every Pulumi run of it gets (credentials travel only there)."""

import contextlib
import hashlib
import os
import urllib.parse
from functools import cache
from pathlib import Path

from pulumi import automation as auto

from spotpool.api.stackconfig import PROJECT
from spotpool.engine.basics.errors import EngineError
from spotpool.engine.basics.settings import EngineSettings
from spotpool.engine.basics.stack_view import StackView, WorkspaceStack
from spotpool.engine.fencing.processes import FencedCommand, check_fence
from spotpool.engine.leftovers import dead_runs
from spotpool.engine.runs import config_file
from spotpool.engine.runs.program import load_program
from spotpool.engine.state import keyserver
from spotpool.engine.state.backend_files import checkpoint_exists, open_backend, write_new_stack
from spotpool.engine.state.lean_stack import LeanStack
from spotpool.engine.tencent import api_proxy, write_safety
from spotpool.toolchain.paths import pulumi_home


@cache
def pulumi_command(root: Path) -> auto.PulumiCommand:
    if not (root / "bin" / "pulumi").exists():
        raise EngineError(f"no pulumi CLI at {root / 'bin'}: run `make toolchain`")
    return _command(root)


@cache
def _command(root: Path) -> auto.PulumiCommand:
    # One per CLI: it holds nothing else.
    return FencedCommand(root=str(root))  # every launch passes the thread's fence first


def own_work_dir(pool: StackView) -> Path:
    """The stack's own workspace directory (its `Pulumi.<stack>.yaml` lives there)."""
    return pool.settings.work_root / pool.name


def select_stack(
    pool: WorkspaceStack,
    work_dir: Path | None = None,
    backend: str | None = None,
    create: bool = True,
) -> LeanStack:
    """The pool's stack in `work_dir` (default: its own) on `backend` (default: the engine's),
    made when `create` and the backend does not hold it yet."""
    settings = pool.settings
    work_dir = work_dir or own_work_dir(pool)
    work_dir.mkdir(parents=True, exist_ok=True)
    workspace = auto.LocalWorkspace(
        work_dir=str(work_dir),
        pulumi_command=pulumi_command(settings.tools_dir.parent),
        env_vars=pool.run_env(),
        secrets_provider=secrets_provider_url(settings),
        program=load_program(settings.project_dir),
        project_settings=auto.ProjectSettings(
            name=PROJECT,
            runtime="python",
            main=os.getcwd(),  # as the Automation API sets it for an inline program
            backend=auto.ProjectBackend(url=backend or settings.backend_url),
        ),
    )
    settings_file = config_file.settings_path(work_dir, pool.name)
    # A settings file another passphrase's run left here (the work dir outlives a world, or is
    # shared by runs on several backends) is replaced, not handed to the CLI to fail on.
    config_file.drop_if_stale(settings_file, settings.passphrase.get_secret_value())
    if create and not settings_file.exists():
        # A stack a self-managed backend does not hold is made here, as `pulumi stack init`
        # makes it, with the process's salt: no CLI run before its first `up`.
        # The backend's keys are where Pulumi's runs find them: this process's environment
        # (a pod's), which the runs inherit; the run's own variables only add to it.
        files = open_backend(backend or settings.backend_url, {**os.environ, **pool.run_env()})
        if files is not None and not checkpoint_exists(files, PROJECT, pool.name):
            secrets = config_file.prepare_new_stack(settings_file, settings)
            check_fence()  # a write to the backend, as a CLI launch would be
            version = str(workspace.pulumi_version)
            if write_new_stack(files, PROJECT, pool.name, version, secrets):
                return LeanStack.made(pool.name, workspace)
    return LeanStack.open(pool.name, workspace, create)


def secrets_provider_url(settings: EngineSettings) -> str:
    """What `pulumi stack init --secrets-provider` is given for the pool's new stacks."""
    return keyserver.URL if settings.secrets_provider == "keyserver" else "passphrase"


def engine_home(work_root: Path) -> Path:
    """Pulumi's home for the engine's runs: Pulumi's plugins, and no automatic debug logs.

    Pulumi 3.259 writes a debug log of every command into `$PULUMI_HOME/logs` (gzip, not
    encrypted, until a run upgrades it), keeps up to 500 MB or 7 days of them, and lists and
    stats every one at each CLI start: an operator's home filled with thousands of files, each
    run paying for the listing. A file named `logs` makes Pulumi skip them, silently.
    """
    home = work_root / ".pulumi-home"
    if (home / "logs").is_file():  # looked at before every run: the work dir may be new
        return home
    home.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):  # made already (another thread, a restart)
        (home / "plugins").symlink_to(pulumi_home() / "plugins", target_is_directory=True)
    (home / "logs").touch()
    return home


def forget_work_dir(work_root: Path, work_dir: Path) -> None:
    """Drop Pulumi's memo of the stack selected in a throwaway `work_dir` (a file in the
    engine's home named after the project file's path), so a preview leaves nothing behind."""
    digest = hashlib.sha1(str(work_dir / "Pulumi.yaml").encode()).hexdigest()
    memo = engine_home(work_root) / "workspaces" / f"{PROJECT}-{digest}-workspace.json"
    memo.unlink(missing_ok=True)


def _plain_http_host(backend_url: str) -> str | None:
    """The host of an `s3://…?endpoint=http://HOST:PORT` backend, else None."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(backend_url).query)
    endpoint = (query.get("endpoint") or [""])[-1]
    if not endpoint.startswith("http://"):
        return None
    return urllib.parse.urlsplit(endpoint).hostname


def pulumi_env(pool: StackView) -> dict[str, str]:
    """The environment of every Pulumi run of the pool's stack (`WorkspaceStack.run_env`)."""
    settings = pool.settings
    env = {
        **settings.passphrase_env(),  # a file when one serves it: not in the run's environ
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DIY_BACKEND_NO_LEGACY_WARNING": "true",
        # The plugins are installed in Pulumi's home; the copies beside the CLI on PATH
        # would only earn a warning on every run.
        "PULUMI_IGNORE_AMBIENT_PLUGINS": "true",
        # A bounded backend: compressed checkpoints and no .bak copy beside each one (the
        # history keeps the last few; recovery never needs the backup).
        "PULUMI_DIY_BACKEND_GZIP": "true",
        "PULUMI_DIY_BACKEND_DISABLE_CHECKPOINT_BACKUPS": "true",
        "TENCENTCLOUD_REGION": pool.region,
        **pool.credentials.provider_env(),
    }
    if settings.cloud_endpoint:
        # The provider talks to <service>.tencentcloudapi.com over plain HTTP, through the
        # emulator acting as the HTTP proxy: the provider's code path is the real one.
        env["TENCENTCLOUD_PROTOCOL"] = "HTTP"
        env["HTTP_PROXY"] = settings.cloud_endpoint
        env["http_proxy"] = settings.cloud_endpoint
    # The provider's calls go through the local API proxy, always: each run signs with
    # placeholder keys (run_fence.admitted) that the proxy checks and replaces with the real
    # ones — renewed, when temporary (a run may outlive the keys it started with) — and
    # they take the operator's rate-limit tokens (unless rate_limit_runs is off).
    env.update(api_proxy.proxy_for(settings.cloud_endpoint, settings.rate_limit_runs).env())
    # Its creates are written down before the proxy sends them (dead_runs.py): found again
    # whatever happens to their answer or the run.
    write_safety.register_journal(pool.name, lambda: dead_runs.BackendJournal(pool))
    env[write_safety.STACK_VARIABLE] = pool.name
    # The proxy takes API calls only: a backend reached in plain HTTP on another host (an
    # in-VPC MinIO) is not sent through it (Go never proxies loopback addresses anyway).
    backend_host = _plain_http_host(settings.backend_url)
    if backend_host:
        for name in ("NO_PROXY", "no_proxy"):
            env[name] = ",".join(filter(None, [env.get(name, ""), backend_host]))
    # Stacks of either provider open, whichever new stacks get (settings.secrets_provider).
    env.update(keyserver.service_for(settings.passphrase.get_secret_value()).env())
    env["PULUMI_HOME"] = str(engine_home(settings.work_root))
    # A CLI run lives a second or two: collecting its garbage a fifth as often saves ~14 %
    # of the engine's CPU (bench/engine_ops.py) for ~10 % more peak memory.
    env["GOGC"] = os.environ.get("GOGC", "400")
    return env
