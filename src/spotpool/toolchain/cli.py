"""`spotpool toolchain install | status | env`."""

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from spotpool.toolchain.gobuild import ToolUnavailable
from spotpool.toolchain.install import BUILT, LOCAL_SOURCE_ENV, obtain, place, status
from spotpool.toolchain.manifest import TOOLS, TOOLS_BY_NAME, Tool
from spotpool.toolchain.paths import bin_dir, cache_root, pulumi_home

app = typer.Typer(help="Install and inspect the pinned upstream tools.", no_args_is_help=True)
console = Console(stderr=True)


def _select(names: list[str] | None) -> list[Tool]:
    if not names:
        return TOOLS
    unknown = [n for n in names if n not in TOOLS_BY_NAME]
    if unknown:
        known = ", ".join(TOOLS_BY_NAME)
        raise typer.BadParameter(f"unknown tool(s) {', '.join(unknown)}; known: {known}")
    return [TOOLS_BY_NAME[n] for n in names]


@app.command("install")
def install_command(
    names: list[str] | None = typer.Argument(None, help="tools to install (default: all)"),
    local_source: Path | None = typer.Option(
        None,
        "--local-source",
        envvar=LOCAL_SOURCE_ENV,
        help="a directory of tool source folders (an offline mirror), built from when every "
        "other source fails",
    ),
    jobs: int = typer.Option(
        2,
        "--jobs",
        min=1,
        help="tools built at once: a build's downloads and its serial link step leave cores "
        "idle that the next build fills",
    ),
) -> None:
    """Install the pinned tools into the user-level cache (idempotent)."""
    if local_source is not None and not local_source.is_dir():
        raise typer.BadParameter(f"{local_source} is not a directory", param_hint="--local-source")
    local_source = local_source.resolve() if local_source else None
    failed: list[str] = []
    table = Table("tool", "version", "source", "seconds", "peak MiB", title="toolchain")
    tools = _select(names)
    started = time.monotonic()
    with (
        console.status(f"{len(tools)} tools, {jobs} at a time…"),
        ThreadPoolExecutor(max_workers=jobs) as pool,
    ):
        obtaining = [
            (tool, pool.submit(obtain, tool, lambda line: console.log(line), local_source))
            for tool in tools
        ]
        # Placed in the manifest's order: a plugin's registration needs the pulumi CLI placed.
        for tool, future in obtaining:
            try:
                obtained = future.result()
                record = obtained.record
                cached = obtained.placed  # installed before: its build time is not this run's
                if not cached:
                    record = place(tool, record, local_source)
            except ToolUnavailable as err:
                if tool.optional_because:
                    console.print(
                        f"[yellow]! {tool.name} {tool.version} cannot be had here "
                        f"(optional: {tool.optional_because}):[/] {err}"
                    )
                    continue
                console.print(f"[red]✗ {tool.name} {tool.version} cannot be had here:[/] {err}")
                failed.append(tool.name)
                continue
            took = f"{record.seconds if record.source in BUILT else 0.0:.1f}"
            peak = f"{record.peak_rss_mib:.0f}" if record.peak_rss_mib else "-"
            if cached:
                took, peak = "cached", "-"
            table.add_row(tool.name, tool.version, record.source, took, peak)
    console.print(table)
    console.print(f"toolchain: {time.monotonic() - started:.0f} s in all")
    if failed:
        console.print(f"[red]missing:[/] {', '.join(failed)}")
        raise typer.Exit(1)


@app.command("status")
def status_command(
    names: list[str] | None = typer.Argument(None, help="tools to check (default: all)"),
) -> None:
    """One line per tool: name, version, source, path, ok or missing. Exits 1 if a needed one
    is missing."""
    missing = 0
    for tool in _select(names):
        state = status(tool)
        detail = state.detail
        if not state.ok and tool.optional_because:
            detail += " (optional)"
        else:
            missing += not state.ok
        source = state.source or "-"
        print(f"{state.name}\t{state.version}\t{source}\t{state.path}\t{detail}")
    raise typer.Exit(1 if missing else 0)


@app.command("env")
def env_command() -> None:
    """Print shell exports for using the tools by hand: eval "$(spotpool toolchain env)"."""
    print(f'export PATH="{bin_dir()}:$PATH"')
    print(f'export PULUMI_HOME="{pulumi_home()}"')
    print("export PULUMI_SKIP_UPDATE_CHECK=true")
    # The resource plugins are registered in PULUMI_HOME; their links on PATH would only earn
    # a "using … from $PATH" warning on every run. The language host sits beside the CLI.
    print("export PULUMI_IGNORE_AMBIENT_PLUGINS=true")
    override = os.environ.get("SPOTPOOL_CACHE_DIR", "unset")
    print(f"# cache: {cache_root()} (SPOTPOOL_CACHE_DIR overrides it; now {override})")
