"""`spotpool cluster up | down`."""

from pathlib import Path

import typer
from rich.console import Console

from spotpool.cluster.local import ClusterError, default_directory, down, up

app = typer.Typer(
    help="A local control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager.",
    no_args_is_help=True,
)
console = Console(stderr=True)

DirOption = typer.Option(None, "--dir", help="state directory (default: user-level state dir)")
SchedulerOption = typer.Option(
    False, "--scheduler", help="also run kube-scheduler (a test tool: `toolchain install` it)"
)


@app.command("up")
def up_command(directory: Path | None = DirOption, scheduler: bool = SchedulerOption) -> None:
    """Start etcd, kube-apiserver and kube-controller-manager (and kube-scheduler with
    --scheduler) on free loopback ports and write DIR/kubeconfig."""
    target = (directory or default_directory()).resolve()
    try:
        with console.status("starting etcd, kube-apiserver and kube-controller-manager…"):
            state = up(target, scheduler=scheduler)
    except ClusterError as err:
        console.print(f"[red]cluster up failed:[/] {err}")
        raise typer.Exit(1) from err
    console.print(f"[green]✓[/] kube-apiserver ready at {state.server}")
    console.print(f"  export KUBECONFIG={state.kubeconfig}")
    console.print("  kubectl get --raw /readyz")
    console.print(f"  stop it with: spotpool cluster down --dir {target}")


@app.command("down")
def down_command(directory: Path | None = DirOption) -> None:
    """Stop exactly what `cluster up` started in DIR."""
    target = (directory or default_directory()).resolve()
    try:
        stopped = down(target)
    except ClusterError as err:
        console.print(f"[red]cluster down:[/] {err}")
        raise typer.Exit(1) from err
    console.print(f"[green]✓[/] stopped {len(stopped)} process(es): {stopped}")
