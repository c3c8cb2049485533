"""`spotpool image build`."""

from pathlib import Path

import typer
from rich.console import Console

from spotpool.image.base import BaseImageError
from spotpool.image.build import ImageBuildError, build
from spotpool.image.context import ContextError
from spotpool.image.host import HostToolsMissing
from spotpool.image.prune import KEEP

app = typer.Typer(help="Build the operator image (buildah/podman).", no_args_is_help=True)
console = Console(stderr=True)


@app.command("build")
def build_command(
    root: Path = typer.Option(
        Path("."), "--root", help="the repository to build from", file_okay=False, exists=True
    ),
    ca: Path | None = typer.Option(
        None,
        "--ca",
        help="a CA bundle for the build's downloads (a TLS-inspecting proxy); default "
        "$SSL_CERT_FILE or the system bundle. A build secret: it is in no layer",
    ),
    local_base: bool = typer.Option(
        False, "--local-base", help="make the base here (debootstrap) without asking a registry"
    ),
    force: bool = typer.Option(
        False, "--force", help="build even if an image of these inputs exists"
    ),
    no_cache: bool = typer.Option(
        False, "--no-cache", help="build every layer again (a cold build; implies --force)"
    ),
    keep: int = typer.Option(
        KEEP,
        "--keep",
        min=0,
        help="after the build, remove all but this many of the newest images it made "
        "(each is ~0.5 GB); 0 keeps every one",
    ),
) -> None:
    """Build the operator image (localhost/spotpool-operator:<version>), installing buildah and
    podman from the distribution's packages when missing; skipped when an image built from the
    same inputs (files, tool versions, base, revision) exists."""
    try:
        image = build(
            root.resolve(),
            console.log,
            ca=ca,
            local_base=local_base,
            force=force,
            no_cache=no_cache,
            keep=keep,
        )
    except (HostToolsMissing, BaseImageError, ContextError, ImageBuildError) as err:
        console.print(f"[red]✗ image:[/] {err}")
        raise typer.Exit(1) from err
    print(image.reference)
