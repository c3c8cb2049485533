"""`spotpool stacks ls | show NAME`: each pool's stack beside its Spotpool, read-only."""

import json

import typer
from rich.console import Console
from rich.table import Table

from spotpool.engine import inventory
from spotpool.engine.settings import EngineSettings

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
    table = Table("pool", "stack", "instances", "last operation", "drift (last refresh)")
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
        )
    console.print(table)


@app.command("show")
def show_stack(name: str, backend: str | None = BACKEND) -> None:
    """Everything known about one pool's stack (`<namespace>.<name>`), as JSON."""
    settings = _settings(backend)
    if name not in inventory.stack_names(settings):
        raise typer.BadParameter(f"no stack {name!r} in {settings.backend_for_display()}")
    view = inventory.view(settings, name)
    typer.echo(json.dumps(view.model_dump(mode="json", by_alias=True), indent=2))
