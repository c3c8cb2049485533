"""The `spotpool` command line: one entry point, one sub-command group per part."""

import typer
from spotpool_deploy.cli import app as deploy_app
from spotpool_operator.cli import app as operator_app
from spotpool_operator.shards_cli import shards

from spotpool.api.cli import app as crd_app
from spotpool.cluster.cli import app as cluster_app
from spotpool.demo import demo
from spotpool.emulator.cli import app as emulator_app
from spotpool.notices.cli import notice_agent
from spotpool.preview.cli import PreviewCommand, preview
from spotpool.stacks_cli import app as stacks_app
from spotpool.toolchain.cli import app as toolchain_app

app = typer.Typer(
    name="spotpool",
    help="Keep pools of Tencent Cloud spot instances at their declared size.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # locals may hold credentials
)
app.add_typer(toolchain_app, name="toolchain")
app.add_typer(cluster_app, name="cluster")
app.add_typer(emulator_app, name="emulator")
app.add_typer(crd_app, name="crd")
app.add_typer(operator_app, name="operator")
app.add_typer(deploy_app, name="deploy")
app.add_typer(stacks_app, name="stacks")
app.command(cls=PreviewCommand)(preview)
app.command()(demo)
app.command("notice-agent")(notice_agent)
app.command()(shards)
