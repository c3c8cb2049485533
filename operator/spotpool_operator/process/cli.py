"""`spotpool operator run`: every flag also read from an environment variable."""

import os
from enum import StrEnum
from pathlib import Path

import typer
from pydantic import SecretStr, ValidationError

from spotpool.api.spec import parse_duration
from spotpool.engine.tencent.ratelimit import RateLimits

app = typer.Typer(help="The Spotpool operator (kopf).", no_args_is_help=True)


class SecretsProvider(StrEnum):
    passphrase = "passphrase"
    keyserver = "keyserver"


class SweepMode(StrEnum):
    terminate = "terminate"
    report = "report"
    off = "off"


class LogFormat(StrEnum):
    plain = "plain"
    full = "full"
    json = "json"


MIN_ORPHAN_GRACE = 10.0  # seconds: two sweeps (5 s apart at the least) must see a pool gone


def _seconds(text: str) -> float:
    """30, 30s, 5m or 1h30m."""
    try:
        return float(text)
    except ValueError:
        return parse_duration(text)


def _duration(text: str, flag: str) -> float:
    try:
        return _seconds(text)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint=flag) from None


def _passphrase(passphrase_file: Path | None) -> SecretStr:
    """The stacks' passphrase, refused when weak: it guards every secret of the state and,
    without --notice-secret-file, the notice tokens (an instance's token must not let anyone
    test guesses of it)."""
    from spotpool.engine.basics.settings import weak_passphrase  # the engine loads in `run`

    found = _read_passphrase(passphrase_file)
    if (why := weak_passphrase(found.get_secret_value())) is not None:
        raise typer.BadParameter(
            f"the stacks' passphrase is weak: {why} (for example `openssl rand -base64 24`; "
            "existing stacks take a new one with `pulumi stack change-secrets-provider`)",
            param_hint="--passphrase-file",
        )
    return found


def _read_passphrase(passphrase_file: Path | None) -> SecretStr:
    if passphrase_file is not None:
        try:
            text = passphrase_file.read_text().strip()
        except OSError as error:
            raise typer.BadParameter(f"cannot read {passphrase_file}: {error.strerror}") from None
        if not text:
            raise typer.BadParameter(f"{passphrase_file} is empty")
        return SecretStr(text)
    from spotpool.engine.basics.settings import (
        passphrase_from_env,  # the engine loads only in `run`
    )

    from_env = passphrase_from_env()
    if not from_env:
        raise typer.BadParameter(
            "no secrets passphrase for the stacks: set PULUMI_CONFIG_PASSPHRASE "
            "or pass --passphrase-file (for example a mounted Secret)",
            param_hint="--passphrase-file",
        )
    return SecretStr(from_env)


def _notice_secret(path: Path | None) -> SecretStr | None:
    if path is None:
        return None
    try:
        text = path.read_text().strip()
    except OSError as error:
        raise typer.BadParameter(f"cannot read {path}: {error.strerror}") from None
    if len(text) < 16:
        raise typer.BadParameter(f"{path}: give at least 16 characters of secret")
    return SecretStr(text)


def _install_id(lease_namespace: str | None, lease_name: str) -> str:
    """One install = one Lease: its namespace and name, stable across restarts."""
    return f"{lease_namespace}.{lease_name}" if lease_namespace else "default"


def _pod_namespace() -> str | None:
    """The namespace this pod runs in (its service account says), or None outside a pod."""
    mounted = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    if os.environ.get("KUBERNETES_SERVICE_HOST") and mounted.exists():
        return mounted.read_text().strip() or None
    return None


def _rate_limits(pairs: list[str]) -> RateLimits:
    limits = RateLimits()
    for pair in (part.strip() for item in pairs for part in item.split(",") if part.strip()):
        action, sep, rate = pair.partition("=")
        try:
            value = float(rate)
        except ValueError:
            value = -1.0
        if not sep or not action or value <= 0:
            raise typer.BadParameter(
                f"{pair!r}: give ACTION=CALLS_PER_SECOND, e.g. RunInstances=10",
                param_hint="--api-limit",
            )
        limits.rates[action.strip()] = value
    return limits


@app.command()
def run(
    namespace: list[str] = typer.Option(
        [],
        "--namespace",
        "-n",
        envvar="SPOTPOOL_NAMESPACE",
        help="Namespace to serve (repeat, or comma-separate; kopf globs work).",
    ),
    all_namespaces: bool = typer.Option(
        False,
        "--all-namespaces",
        "-A",
        envvar="SPOTPOOL_ALL_NAMESPACES",
        help="Serve every namespace (the default when no --namespace is given).",
    ),
    backend: str | None = typer.Option(
        None,
        "--backend",
        envvar="SPOTPOOL_BACKEND_URL",
        help="Pulumi state backend (file://, s3://, https://). Default: a file backend "
        "under $XDG_STATE_HOME/spotpool.",
    ),
    cloud_endpoint: str | None = typer.Option(
        None,
        "--cloud-endpoint",
        envvar="SPOTPOOL_CLOUD_ENDPOINT",
        help="URL of `spotpool emulator serve`; unset means the real Tencent Cloud.",
    ),
    max_concurrent: int = typer.Option(
        4,
        "--max-concurrent",
        min=1,
        max=256,
        envvar="SPOTPOOL_MAX_CONCURRENT",
        help="Engine operations in flight across all pools.",
    ),
    refresh_interval: str = typer.Option(
        "60s",
        "--refresh-interval",
        envvar="SPOTPOOL_REFRESH_INTERVAL",
        help="Check period of pools that set no spec.refreshInterval (seconds, or 30s/5m): each "
        "check asks the cloud whether the pool's instances live (or trusts the fleet probe); a "
        "full Pulumi refresh runs only on a miss or every --full-refresh-every-th check.",
    ),
    full_refresh_every: int = typer.Option(
        60,
        "--full-refresh-every",
        min=0,
        envvar="SPOTPOOL_FULL_REFRESH_EVERY",
        help="Each refresh first asks the cloud (one call) whether every instance is alive, "
        "and runs a Pulumi refresh only when one is missing, or every N-th time (0: never).",
    ),
    probe_budget: float = typer.Option(
        1.0,
        "--probe-budget",
        min=0.0,
        envvar="SPOTPOOL_PROBE_BUDGET",
        help="DescribeInstances calls a second the fleet probe may spend (per key pair and "
        "region, of Tencent's 40/s); it looks every max(1 s, √pages / budget): one call a look "
        "once the fleet spans pages (a count), a sweep only when it moved. 0 turns it off.",
    ),
    avoid_for: str = typer.Option(
        "3m",
        "--avoid-for",
        envvar="SPOTPOOL_AVOID_FOR",
        help="After a reclaim or a no-stock answer, place new instances elsewhere than that "
        "zone and instance type for this long (seconds, or 30s/3m).",
    ),
    interruption_half_life: str = typer.Option(
        "6h",
        "--interruption-half-life",
        envvar="SPOTPOOL_INTERRUPTION_HALF_LIFE",
        help="Learned interruption rates (reclaims and notices per instance-hour, per zone and "
        "type, kept in the ConfigMap <lease-name>-interruptions) count an interruption this "
        "long ago half (seconds, or 30m/6h).",
    ),
    api_limit: list[str] = typer.Option(
        [],
        "--api-limit",
        envvar="SPOTPOOL_API_LIMITS",
        help="ACTION=CALLS_PER_SECOND for the token buckets (repeat; defaults: "
        "DescribeInstances=40, RunInstances=10, TerminateInstances=10, others 20).",
    ),
    lease_name: str = typer.Option(
        "spotpool-operator",
        "--lease-name",
        envvar="SPOTPOOL_LEASE_NAME",
        help="Base name of the install's Leases (coordination.k8s.io) in --lease-namespace: "
        "with --shards N > 1, one Lease <lease-name>-shard-<i> per shard and one "
        "<lease-name>-member-<hostname> per replica; with --shards 1, the single Lease "
        "<lease-name> naming the one replica that writes. Also the default --install-id.",
    ),
    lease_namespace: str | None = typer.Option(
        None,
        "--lease-namespace",
        envvar="SPOTPOOL_LEASE_NAMESPACE",
        help="Namespace of the Lease. Default: the pod's own namespace in a cluster; run by "
        "hand without it, there is no Lease and only this host's dead runs' locks are broken.",
    ),
    lease_duration: str = typer.Option(
        "30s",
        "--lease-duration",
        envvar="SPOTPOOL_LEASE_DURATION",
        help="How long the Lease lasts unrenewed (a killed replica's successor waits this).",
    ),
    shards: int = typer.Option(
        16,
        "--shards",
        min=1,
        max=1024,
        envvar="SPOTPOOL_SHARDS",
        help="Shards the pools hash onto (by uid), each a Lease `<lease-name>-shard-<i>` that one "
        "replica holds; replicas divide them. 1: the single Lease <lease-name>. Every replica "
        "of an install must use the same number.",
    ),
    max_concurrent_per_account: int = typer.Option(
        8,
        "--max-concurrent-per-account",
        min=0,
        envvar="SPOTPOOL_MAX_CONCURRENT_PER_ACCOUNT",
        help="Engine operations at once on one cloud account across all replicas (each takes "
        "its share); 0: no bound beyond --max-concurrent.",
    ),
    fast_launch: bool = typer.Option(
        True,
        "--fast-launch/--no-fast-launch",
        envvar="SPOTPOOL_FAST_LAUNCH",
        help="Launch a reclaimed slot's next instance through the cloud API at once, before "
        "the pool's Pulumi run, which adopts it (the storm fast path).",
    ),
    operation_timeout: str = typer.Option(
        "30m",
        "--operation-timeout",
        envvar="SPOTPOOL_OPERATION_TIMEOUT",
        help="A Pulumi operation running longer is killed with its plugins, and retried.",
    ),
    install_id: str | None = typer.Option(
        None,
        "--install-id",
        envvar="SPOTPOOL_INSTALL_ID",
        help="Names this install on every instance it makes; only its own orphans are ever "
        "adopted or terminated. Default: LEASE_NAMESPACE.LEASE_NAME, or 'default' by hand.",
    ),
    cluster_id: str | None = typer.Option(
        None,
        "--cluster-id",
        envvar="SPOTPOOL_CLUSTER_ID",
        help="Names this cluster on every instance the install makes (tag spotpool-cluster); "
        "only instances with this cluster's and this install's tags are ever adopted or "
        "terminated. Default: the kube-system Namespace's uid. Never another live "
        "cluster's: two live clusters with one identity hold each other (IdentityConflict).",
    ),
    take_over_from: list[str] = typer.Option(
        [],
        "--take-over-from",
        envvar="SPOTPOOL_TAKE_OVER_FROM",
        help="A cluster id (repeat, or comma-separate) whose stacks in the backend this "
        "cluster takes over: the cluster is gone for good (rebuilt, lost). Without it, a stack "
        "another cluster runs is never run from here (Event StackHeldByAnotherCluster).",
    ),
    take_over_after: str = typer.Option(
        "168h",
        "--take-over-after",
        envvar="SPOTPOOL_TAKE_OVER_AFTER",
        help="A stack another cluster runs is taken over without --take-over-from once that "
        "cluster's operator has not renewed its claim for this long (0: never).",
    ),
    sweep: SweepMode = typer.Option(
        "terminate",
        "--sweep",
        envvar="SPOTPOOL_SWEEP",
        help="Instances of a deleted pool (this cluster's and install's, held by no stack, "
        "their pool missing for --orphan-grace): terminate them, report them only (Event "
        "OrphanFound and a metric), or off (no sweep).",
    ),
    orphan_grace: str = typer.Option(
        "15m",
        "--orphan-grace",
        envvar="SPOTPOOL_ORPHAN_GRACE",
        help="An instance of this install that no stack holds is terminated only once it is "
        "older than this (a younger one may be a create still in flight); the sweep of "
        "instances whose pool is gone terminates them only once two listings this far apart "
        "both lacked the pool. At least 10s.",
    ),
    operator_class: str = typer.Option(
        "",
        "--operator-class",
        envvar="SPOTPOOL_OPERATOR_CLASS",
        help="Serve only the pools whose spec.operatorClass is this; empty (the default): the "
        "pools that set none. Installs watching the same namespaces need different classes.",
    ),
    history_keep: int = typer.Option(
        10,
        "--history-keep",
        min=0,
        envvar="SPOTPOOL_HISTORY_KEEP",
        help="Updates kept in each stack's history on a file backend (0: all).",
    ),
    passphrase_file: Path | None = typer.Option(
        None,
        "--passphrase-file",
        envvar="SPOTPOOL_PASSPHRASE_FILE",
        help="File holding the stacks' secrets passphrase (else PULUMI_CONFIG_PASSPHRASE).",
    ),
    secrets_provider: SecretsProvider = typer.Option(
        "passphrase",
        "--secrets-provider",
        envvar="SPOTPOOL_SECRETS_PROVIDER",
        help="New stacks' secrets: passphrase (Pulumi's own) or keyserver (hashivault://spotpool, "
        "served by the operator on 127.0.0.1: no key derivation in every Pulumi run).",
    ),
    work_dir: Path | None = typer.Option(
        None, "--work-dir", envvar="SPOTPOOL_WORK_DIR", help="Per-stack workspaces."
    ),
    metrics_host: str = typer.Option(
        "127.0.0.1",
        "--metrics-host",
        envvar="SPOTPOOL_METRICS_HOST",
        help="Address of the metrics port, and of the liveness port unless --liveness-host "
        "says (0.0.0.0 in a pod).",
    ),
    metrics_port: int = typer.Option(
        9090,
        "--metrics-port",
        min=0,
        max=65535,
        envvar="SPOTPOOL_METRICS_PORT",
        help="Prometheus metrics on http://HOST:PORT/metrics; 0 turns them off.",
    ),
    liveness_host: str | None = typer.Option(
        None,
        "--liveness-host",
        envvar="SPOTPOOL_LIVENESS_HOST",
        help="Address of the liveness port; default: --metrics-host's.",
    ),
    liveness_port: int = typer.Option(
        8081,
        "--liveness-port",
        min=0,
        max=65535,
        envvar="SPOTPOOL_LIVENESS_PORT",
        help="kopf's liveness probe on http://HOST:PORT/healthz; 0 turns it off.",
    ),
    notice_port: int = typer.Option(
        0,
        "--notice-port",
        min=0,
        max=65535,
        envvar="SPOTPOOL_NOTICE_PORT",
        help="Port of the termination-notice endpoint the pools' agents report to; 0 turns "
        "notices off (no agent is installed on the instances).",
    ),
    notice_host: str = typer.Option(
        "127.0.0.1",
        "--notice-host",
        envvar="SPOTPOOL_NOTICE_HOST",
        help="Address the notice endpoint listens on (0.0.0.0 in a pod).",
    ),
    notice_url: str | None = typer.Option(
        None,
        "--notice-url",
        envvar="SPOTPOOL_NOTICE_URL",
        help="The notice endpoint as the instances reach it, e.g. http://10.0.0.5:8090 (a "
        "Service or load balancer in the VPC). Default: http://HOST:PORT.",
    ),
    notice_secret_file: Path | None = typer.Option(
        None,
        "--notice-secret-file",
        envvar="SPOTPOOL_NOTICE_SECRET_FILE",
        help="Key the agents' per-slot tokens derive from. Default: derived from the stacks' "
        "passphrase.",
    ),
    notice_grace: float = typer.Option(
        600.0,
        "--notice-grace",
        min=1,
        envvar="SPOTPOOL_NOTICE_GRACE",
        help="Seconds after a notice's receipt its instance may still run before the surge "
        "instance started for it is deleted.",
    ),
    surge_max_life: float = typer.Option(
        1800.0,
        "--surge-max-life",
        min=1,
        envvar="SPOTPOOL_SURGE_MAX_LIFE",
        help="Seconds a surge instance lives at most unless it took its slot.",
    ),
    log_format: LogFormat = typer.Option(
        LogFormat.json, "--log-format", envvar="SPOTPOOL_LOG_FORMAT", help="Log line format."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logs."),
) -> None:
    """Keep every Spotpool converged: up on change, refresh on a timer, replace reclaims."""
    import kopf

    from spotpool.engine.basics.settings import EngineSettings, state_root
    from spotpool_operator.basics.settings import OperatorSettings
    from spotpool_operator.cloud.fleet import ProbeSettings
    from spotpool_operator.process.runner import run as run_operator
    from spotpool_operator.reporting import logmask

    namespaces = [part.strip() for item in namespace for part in item.split(",") if part.strip()]
    if namespaces and all_namespaces:
        raise typer.BadParameter("give --namespace or --all-namespaces, not both")
    try:
        interval = _seconds(refresh_interval)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--refresh-interval") from None
    try:
        lease_seconds = _seconds(lease_duration)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--lease-duration") from None
    try:
        timeout_seconds = _seconds(operation_timeout)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--operation-timeout") from None
    try:
        grace_seconds = _seconds(orphan_grace)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--orphan-grace") from None
    if grace_seconds < MIN_ORPHAN_GRACE:  # 0 would let one listing decide
        raise typer.BadParameter(
            f"{orphan_grace}: give at least {MIN_ORPHAN_GRACE:.0f}s — a pool counts as deleted "
            "only once two listings this far apart both lack it, and an instance this young "
            "may be a create still in flight",
            param_hint="--orphan-grace",
        )
    lease_home = lease_namespace or _pod_namespace()
    state = state_root()
    backend_url = backend or f"file://{state / 'backend'}"
    if backend_url.startswith("file://"):
        from spotpool.engine.state.backend_files import BackendUrlError, file_root

        try:  # where Pulumi puts it (`~`, `?query`), never a literal `~` directory
            file_root(backend_url).mkdir(parents=True, exist_ok=True)
        except BackendUrlError as error:
            raise typer.BadParameter(str(error), param_hint="--backend") from None
    try:
        settings = OperatorSettings(
            engine=EngineSettings(
                backend_url=backend_url,
                passphrase=_passphrase(passphrase_file),
                passphrase_file=passphrase_file,
                secrets_provider=secrets_provider.value,
                work_root=work_dir or state / "workspaces",
                cloud_endpoint=cloud_endpoint or None,
                operation_timeout=timeout_seconds,
                history_keep=history_keep,
                install_id=install_id or _install_id(lease_home, lease_name),
                cluster_id=cluster_id or None,
                orphan_min_age=grace_seconds,
                notice_secret=_notice_secret(notice_secret_file),
            ),
            namespaces=namespaces,
            all_namespaces=all_namespaces or not namespaces,
            max_concurrent=max_concurrent,
            refresh_interval=interval,
            full_refresh_every=full_refresh_every,
            probe=ProbeSettings(budget=probe_budget),
            avoid_seconds=_duration(avoid_for, "--avoid-for"),
            interruption_half_life=_duration(interruption_half_life, "--interruption-half-life"),
            lease_name=lease_name,
            operator_class=operator_class,
            lease_namespace=lease_home,
            lease_duration=lease_seconds,
            shards=shards,
            max_concurrent_per_account=max_concurrent_per_account,
            fast_launch=fast_launch,
            sweep=sweep.value,
            take_over_from=[p.strip() for i in take_over_from for p in i.split(",") if p.strip()],
            take_over_after=_duration(take_over_after, "--take-over-after"),
            rate_limits=_rate_limits(api_limit),
            metrics_host=metrics_host,
            metrics_port=metrics_port,
            liveness_port=liveness_port,
            liveness_host=liveness_host or None,
            notice_host=notice_host,
            notice_port=notice_port,
            notice_url=notice_url or None,
            notice_grace=notice_grace,
            surge_max_life=surge_max_life,
        )
    except ValidationError as error:
        raise typer.BadParameter(str(error)) from None
    kopf.configure(
        verbose=verbose, log_format=kopf.LogFormat[log_format.name.upper()], log_prefix=True
    )
    logmask.install()
    run_operator(settings)
