"""`spotpool stacks ls | show NAME | orphaned`: each pool's stack beside its Spotpool, read-only."""

import json
import os
import threading
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from spotpool.engine.basics.settings import EngineSettings, passphrase_from_env, state_root
from spotpool.engine.stacks import inventory
from spotpool.engine.state import keyserver
from spotpool.preview import redact

app = typer.Typer(help="Inspect the pools' Pulumi stacks (read-only).", no_args_is_help=True)
console = Console()


def _settings(backend: str | None) -> EngineSettings:
    settings = EngineSettings.from_env()
    settings.backend_url = backend or settings.backend_url
    return settings


BACKEND = typer.Option(None, "--backend", envvar="SPOTPOOL_BACKEND_URL", help="State backend.")


@app.command("ls")
def list_stacks(backend: str | None = BACKEND) -> None:
    """One line per pool stack: pool, stack, instances, last operation, drift at last refresh."""
    settings = _settings(backend)
    table = Table("pool", "stack", "instances", "last operation", "drift (last refresh)", "drifted")
    for name in inventory.stack_names(settings):
        view = inventory.view(settings, name)
        last = view.last_operation
        refresh = view.last_refresh
        table.add_row(
            f"{view.namespace}/{view.pool}",
            name,
            str(len(view.instances)),
            f"{last.kind} {last.result} {last.start_time:%Y-%m-%d %H:%M:%S}" if last else "-",
            f"{refresh.changes.delete} gone, {refresh.changes.update} changed" if refresh else "-",
            ", ".join(f"slot {d.slot}: {', '.join(f.field for f in d.fields)}" for d in view.drift)
            or "-",
        )
    # Piped or logged: whole lines, not a table wrapped into the default 80 columns.
    (console if console.is_terminal else Console(width=200)).print(table)


@app.command("orphaned")
def orphaned_stacks(
    backend: str | None = BACKEND,
    kubeconfig: str | None = typer.Option(
        None, "--kubeconfig", envvar="KUBECONFIG", help="The cluster whose pools to compare."
    ),
) -> None:
    """Stacks whose pool no longer exists in the cluster (no Spotpool `<namespace>/<name>`):
    their instances are held — never swept — and converged by no one. One line each with the
    instances it holds; exit 1 when there is any. Delete the stack (`pulumi destroy`) or apply
    the pool again to take it back."""
    from spotpool.engine.stacks.orphaned import orphaned

    settings = _settings(backend)
    try:
        live = live_pool_stacks(kubeconfig)
    except Exception as error:
        raise typer.BadParameter(f"cannot list the cluster's Spotpools: {error}") from None
    found = orphaned(settings.backend_url, live)
    if found is None:
        raise typer.BadParameter(f"cannot read the stacks of {settings.backend_for_display()}")
    for name, ids in found.items():
        typer.echo(f"{name}\t{len(ids)} instance(s)\t{' '.join(ids) or '-'}")
    if found:
        raise typer.Exit(1)
    typer.echo("no stack without its pool", err=True)


def live_pool_stacks(kubeconfig: str | None) -> set[str]:
    """The stack name of every Spotpool of the cluster (one list across it)."""
    import kubernetes

    from spotpool.api.spec import GROUP, PLURAL, VERSION

    kubernetes.config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    api = kubernetes.client.CustomObjectsApi()
    listed: Any = api.list_cluster_custom_object(GROUP, VERSION, PLURAL, _request_timeout=60)
    return {
        f"{item['metadata']['namespace']}.{item['metadata']['name']}"
        for item in listed.get("items") or []
    }


@app.command("show")
def show_stack(name: str, backend: str | None = BACKEND) -> None:
    """Everything known about one pool's stack (`<namespace>.<name>`), as JSON."""
    settings = _settings(backend)
    if name not in inventory.stack_names(settings):
        raise typer.BadParameter(f"no stack {name!r} in {settings.backend_for_display()}")
    view = inventory.view(settings, name)
    typer.echo(json.dumps(view.model_dump(mode="json", by_alias=True), indent=2))


@app.command("keys")
def serve_keys(
    port: int = typer.Option(0, "--port", min=0, max=65535, help="Port on 127.0.0.1 (0: any)."),
) -> None:
    """Serve the stacks' keys to the plain `pulumi` CLI (stacks of the `keyserver` secrets
    provider): prints the two variables to export, then serves on 127.0.0.1 until Ctrl-C."""
    passphrase = passphrase_from_env()
    if not passphrase:
        raise typer.BadParameter("set PULUMI_CONFIG_PASSPHRASE (the stacks' passphrase)")
    service = keyserver.KeyService(passphrase, port)
    env = service.env()
    typer.echo(f"export VAULT_ADDR={env['VAULT_ADDR']} VAULT_TOKEN={env['VAULT_TOKEN']}")
    typer.echo("serving the stacks' keys on 127.0.0.1; Ctrl-C ends", err=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        service.close()


@app.command("copy-redacted")
def copy_redacted(
    target: str = typer.Option(
        ...,
        "--to",
        envvar="SPOTPOOL_PREVIEW_BACKEND_URL",
        help="The preview backend that receives the copy.",
    ),
    backend: str | None = BACKEND,
) -> None:
    """Copy every pool's stack into a preview backend, each secret replaced by a placeholder.

    Pull-request previews read the copy: they never hold the operator's passphrase, and the
    copy holds no production secret to decrypt. The source is only read, without its
    passphrase. The copy is encrypted with $SPOTPOOL_PREVIEW_PASSPHRASE; S3 keys of the copy
    come from $PREVIEW_AWS_ACCESS_KEY_ID / $PREVIEW_AWS_SECRET_ACCESS_KEY when set (else the
    ambient AWS_* keys, which also read the source).
    """
    passphrase = os.environ.get("SPOTPOOL_PREVIEW_PASSPHRASE")
    if not passphrase:
        raise typer.BadParameter("set SPOTPOOL_PREVIEW_PASSPHRASE (the preview copy's own)")
    source = backend or f"file://{state_root() / 'backend'}"
    target_env = {
        name: value
        for name, key in (
            ("AWS_ACCESS_KEY_ID", "PREVIEW_AWS_ACCESS_KEY_ID"),
            ("AWS_SECRET_ACCESS_KEY", "PREVIEW_AWS_SECRET_ACCESS_KEY"),
        )
        if (value := os.environ.get(key))
    }
    copied = redact.copy_redacted(
        source, target, passphrase, target_env=target_env, progress=console.print
    )
    console.print(f"{len(copied)} stack(s) copied without their secrets")
