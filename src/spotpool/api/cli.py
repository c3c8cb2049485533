"""`spotpool crd generate [--check]`."""

from pathlib import Path

import typer

from spotpool.api.crd import CRD_PATH, render_yaml

app = typer.Typer(help="The Spotpool CustomResourceDefinition.", no_args_is_help=True)


@app.command("generate")
def generate(
    output: Path = typer.Option(Path(CRD_PATH), help="where to write the CRD"),
    check: bool = typer.Option(False, help="only check that OUTPUT is up to date"),
) -> None:
    """Write the CRD generated from the spec model (or check it has not drifted)."""
    text = render_yaml()
    if check:
        if not output.exists() or output.read_text() != text:
            typer.echo(f"{output} is out of date: run `spotpool crd generate`", err=True)
            raise typer.Exit(1)
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    typer.echo(f"wrote {output}")


@app.command("print")
def print_crd() -> None:
    """Print the CRD to standard output (for `| kubectl apply -f -`)."""
    typer.echo(render_yaml(), nl=False)
