"""`spotpool crd generate [--check]`."""

from pathlib import Path

import typer

from spotpool.api.crd import ACCESS_CRD_PATH, CRD_PATH, render_access_yaml, render_yaml

app = typer.Typer(help="The Spotpool CustomResourceDefinitions.", no_args_is_help=True)


@app.command("generate")
def generate(
    output: Path = typer.Option(
        Path(CRD_PATH),
        help="where to write the Spotpool CRD; the SpotpoolAccessPolicy CRD goes beside it",
    ),
    check: bool = typer.Option(False, help="only check that the files are up to date"),
) -> None:
    """Write the CRDs generated from the models (or check they have not drifted)."""
    files = {
        output: render_yaml(),
        output.parent / Path(ACCESS_CRD_PATH).name: render_access_yaml(),
    }
    if check:
        stale = [
            path for path, text in files.items() if not path.exists() or path.read_text() != text
        ]
        for path in stale:
            typer.echo(f"{path} is out of date: run `spotpool crd generate`", err=True)
        if stale:
            raise typer.Exit(1)
        return
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        typer.echo(f"wrote {path}")


@app.command("print")
def print_crd() -> None:
    """Print both CRDs to standard output (for `| kubectl apply -f -`)."""
    typer.echo(render_yaml() + "---\n" + render_access_yaml(), nl=False)
