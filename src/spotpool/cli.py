"""The `spotpool` command line: one entry point, one sub-command group per part.

Each part is imported only when its sub-command runs (lazy_commands.py): `spotpool --help` and
the notice agent on every spot instance start without kopf, Pulumi or the deploy program."""

import typer

from spotpool.lazy_commands import LazyCommand, LazyGroup
from spotpool.version import describe

# In the order `spotpool --help` lists them (the commands, then the groups, as before); each
# help line is the command's own first line (tests/test_lazy_cli.py keeps them equal).
LAZY_COMMANDS = {
    "preview": LazyCommand(
        "spotpool.preview.cli:preview",
        "Preview Spotpool manifests (or all stacks) without changing anything.",
        command_class="spotpool.preview.cli:PreviewCommand",
    ),
    "demo": LazyCommand(
        "spotpool.demo:demo",
        "Run the operator on the local world (emulator, local kube-apiserver, file backend).",
    ),
    "notice-agent": LazyCommand(
        "spotpool.notices.cli:notice_agent",
        "Run on a spot instance: report the cloud's termination notice to the operator, so "
        "the instance's replacement starts before the reclaim.",
    ),
    "shards": LazyCommand(
        "spotpool_operator.replicas.shards_cli:shards",
        "Which replica holds which shards and how many pools each serves.",
    ),
    "offerings": LazyCommand(
        "spotpool_operator.process.offerings_cli:offerings",
        "Each zone x type's spot price, stock and learned interruption rate, ranked.",
    ),
    "toolchain": LazyCommand(
        "spotpool.toolchain.cli:app", "Install and inspect the pinned upstream tools."
    ),
    "cluster": LazyCommand(
        "spotpool.cluster.cli:app",
        "A local control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager.",
    ),
    "emulator": LazyCommand(
        "spotpool.emulator.cli:app", "A local Tencent Cloud API emulator (CVM with spot)."
    ),
    "crd": LazyCommand("spotpool.api.cli:app", "The Spotpool CustomResourceDefinitions."),
    "operator": LazyCommand("spotpool_operator.process.cli:app", "The Spotpool operator (kopf)."),
    "deploy": LazyCommand("spotpool_deploy.cli:app", "Install the Spotpool operator."),
    "stacks": LazyCommand(
        "spotpool.stacks_cli:app", "Inspect the pools' Pulumi stacks (read-only)."
    ),
    "image": LazyCommand("spotpool.image.cli:app", "Build the operator image (buildah/podman)."),
}


class SpotpoolGroup(LazyGroup):
    lazy_commands = LAZY_COMMANDS


app = typer.Typer(
    name="spotpool",
    cls=SpotpoolGroup,
    help="Keep pools of Tencent Cloud spot instances at their declared size.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # locals may hold credentials
)


def _print_version(value: bool) -> None:
    if value:
        print(describe())
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the version and git revision, and exit.",
    ),
) -> None:
    """Keep pools of Tencent Cloud spot instances at their declared size."""
