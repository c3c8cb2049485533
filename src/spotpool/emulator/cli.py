"""`spotpool emulator ...` commands."""

import typer

app = typer.Typer(help="A local Tencent Cloud API emulator.", no_args_is_help=True)
