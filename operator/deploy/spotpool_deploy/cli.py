"""`spotpool deploy render | run`: the chart for kubectl, and the chart through Pulumi.

Both take the chart's values the way helm does: `--values FILE` (repeat) and `--set PATH=VALUE`
(repeat; VALUE is YAML: `--set replicas=3`, `--set 'watchNamespaces=[team-a, team-b]'`).
"""

import tempfile
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer

from spotpool.engine.basics.settings import state_root
from spotpool_deploy import chart, kustomize

HERE = Path(__file__).resolve().parents[1]
KUSTOMIZE = HERE / "kustomize"
app = typer.Typer(help="Install the Spotpool operator.", no_args_is_help=True, add_completion=False)

VALUES = typer.Option([], "--values", "-f", help="A values file of the chart (repeat).")
SET = typer.Option(
    [], "--set", help="PATH=VALUE, VALUE read as YAML: replicas=3, 'watchNamespaces=[a, b]'."
)
NAMESPACE = typer.Option(chart.NAMESPACE, "--namespace", "-n", help="Where the operator runs.")


def _values(files: list[Path], assignments: list[str]) -> dict[str, Any]:
    try:
        return chart.values_from(files, assignments)
    except chart.ChartError as error:
        raise typer.BadParameter(str(error)) from None


@app.command()
def render(
    out: Path = typer.Option(KUSTOMIZE, help="Directory of the kustomization."),
    check: bool = typer.Option(False, help="Only check that OUT holds what the values give."),
    values: list[Path] = VALUES,
    assignments: list[str] = SET,
    namespace: str = NAMESPACE,
) -> None:
    """Render the chart for `kubectl apply -k OUT`: `helm template` (with the CRD and the
    namespace) split into one file per object. OUT is the kustomization's own directory: every
    other *.yaml in it is deleted. No options: the committed operator/deploy/kustomize."""
    try:
        wanted = kustomize.files(_values(values, assignments), namespace)
    except chart.ChartError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(2) from None
    if check:
        problems = kustomize.drift(wanted, out)
        for problem in problems:
            typer.echo(f"{out}: {problem}", err=True)
        if problems:
            typer.echo("re-render: spotpool deploy render", err=True)
            raise typer.Exit(1)
        return
    written = kustomize.write(wanted, out)
    typer.echo(f"wrote {len(written)} files to {out}")


class Operation(StrEnum):
    up = "up"
    preview = "preview"
    destroy = "destroy"


def _default_state() -> str:
    return f"file://{state_root() / 'deploy-state'}"


@app.command()
def run(
    operation: Operation = typer.Argument(..., help="up, preview or destroy"),
    stack: str = typer.Option("dev", help="Stack of the install."),
    state: str = typer.Option(_default_state(), help="Backend of the install's own stack."),
    kubeconfig: Path | None = typer.Option(None, envvar="KUBECONFIG", help="Cluster to use."),
    skip_await: bool = typer.Option(False, help="Do not wait for pods (no kubelet)."),
    values: list[Path] = VALUES,
    assignments: list[str] = SET,
    namespace: str = NAMESPACE,
) -> None:
    """Install the chart with the Pulumi program, inline (no language host needed), with the
    pinned Pulumi CLI and kubernetes plugin."""
    from spotpool_deploy.automation import install_stack
    from spotpool_deploy.program import Install

    install = Install(_values(values, assignments), namespace, skip_await=skip_await)
    with tempfile.TemporaryDirectory(prefix="spotpool-deploy-") as work_dir:
        pulumi_stack = install_stack(stack, install, state, Path(work_dir), kubeconfig)
        if operation is Operation.up:
            pulumi_stack.up(on_output=typer.echo)
        elif operation is Operation.preview:
            pulumi_stack.preview(on_output=typer.echo)
        else:
            pulumi_stack.destroy(on_output=typer.echo)
