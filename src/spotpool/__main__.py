"""`python -m spotpool`: the same command line as the `spotpool` script."""

from spotpool.cli import app

app()
