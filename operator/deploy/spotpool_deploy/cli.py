"""`python -m spotpool_deploy render | up | preview | destroy`."""

import tempfile
from enum import StrEnum
from pathlib import Path

import typer
import yaml
from pydantic import ValidationError

from spotpool.engine.settings import state_root
from spotpool_deploy import helm, kustomize
from spotpool_deploy.config import InstallConfig

HERE = Path(__file__).resolve().parents[1]
app = typer.Typer(help="Install the Spotpool operator.", no_args_is_help=True, add_completion=False)


def load(
    config_file: Path | None,
    image: str | None = None,
    namespace: str | None = None,
    watch: list[str] | None = None,
    backend: str | None = None,
    full_refresh_every: int | None = None,
) -> InstallConfig:
    """Settings from a YAML file (camelCase keys, as in Pulumi config), then the flags."""
    values = (yaml.safe_load(config_file.read_text()) or {}) if config_file else {}
    flags = {
        "image": image,
        "namespace": namespace,
        "backendUrl": backend,
        "fullRefreshEvery": full_refresh_every,
    }
    values.update({key: value for key, value in flags.items() if value is not None})
    if watch:
        values["watchNamespaces"] = watch
    try:
        return InstallConfig.model_validate(values)
    except ValidationError as error:
        raise typer.BadParameter(str(error)) from None


CONFIG = typer.Option(None, "--config", help="YAML file of install settings (camelCase keys).")
IMAGE = typer.Option(None, "--image", help="Operator image.")
NAMESPACE = typer.Option(None, "--namespace", help="Namespace the operator runs in.")
WATCH = typer.Option([], "--watch-namespace", help="Serve only this namespace (repeat).")
BACKEND = typer.Option(None, "--backend-url", help="Pulumi state backend of the pools.")
FULL_REFRESH = typer.Option(
    None,
    "--full-refresh-every",
    min=0,
    help="The operator's --full-refresh-every: a full Pulumi refresh every N-th refresh of a "
    "pool (0: never; default 60).",
)


KUSTOMIZE = HERE / "kustomize"
CHART = HERE / "helm" / helm.CHART_NAME


@app.command()
def render(
    out: Path = typer.Option(KUSTOMIZE, help="Directory of the kustomization."),
    chart: Path | None = typer.Option(
        None,
        help="Directory of the Helm chart (its settings are values, so flags do not change it). "
        "Default: operator/deploy/helm/spotpool when OUT is the default.",
    ),
    check: bool = typer.Option(False, help="Only check that OUT holds what the settings give."),
    config_file: Path | None = CONFIG,
    image: str | None = IMAGE,
    namespace: str | None = NAMESPACE,
    watch: list[str] = WATCH,
    backend: str | None = BACKEND,
    full_refresh_every: int | None = FULL_REFRESH,
) -> None:
    """Write the install as YAML for `kubectl apply -k OUT` and as a Helm chart (or check that
    neither has drifted)."""
    config = load(config_file, image, namespace, watch, backend, full_refresh_every)
    if chart is None and out == KUSTOMIZE:
        chart = CHART
    if check:
        problems = [f"{out}: {problem}" for problem in kustomize.drift(config, out)]
        if chart is not None:
            problems += [f"{chart}: {problem}" for problem in helm.drift(chart)]
        for problem in problems:
            typer.echo(problem, err=True)
        if problems:
            typer.echo("regenerate: python -m spotpool_deploy render", err=True)
            raise typer.Exit(1)
        return
    written = kustomize.write(config, out)
    typer.echo(f"wrote {len(written)} files to {out}")
    if chart is not None:
        typer.echo(f"wrote the chart ({len(helm.write(chart))} files) to {chart}")


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
    config_file: Path | None = CONFIG,
    image: str | None = IMAGE,
    namespace: str | None = NAMESPACE,
    watch: list[str] = WATCH,
    backend: str | None = BACKEND,
    full_refresh_every: int | None = FULL_REFRESH,
) -> None:
    """Run the Pulumi program inline (no language host needed) with the pinned Pulumi CLI."""
    from spotpool_deploy.automation import install_stack

    config = load(config_file, image, namespace, watch, backend, full_refresh_every)
    with tempfile.TemporaryDirectory(prefix="spotpool-deploy-") as work_dir:
        pulumi_stack = install_stack(stack, config, state, Path(work_dir), kubeconfig, skip_await)
        if operation is Operation.up:
            pulumi_stack.up(on_output=typer.echo)
        elif operation is Operation.preview:
            pulumi_stack.preview(on_output=typer.echo)
        else:
            pulumi_stack.destroy(on_output=typer.echo)
