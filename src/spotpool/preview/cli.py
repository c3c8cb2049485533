"""`spotpool preview`: what merging a change would do in the cloud, for pull requests."""

import os
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from pydantic import SecretStr
from typer.core import TyperCommand

from spotpool.engine.basics.settings import EngineSettings
from spotpool.engine.tencent.credentials import Credentials
from spotpool.preview import manifests, report
from spotpool.preview.run import preview_manifests, preview_removed, preview_stacks


class PreviewCommand(TyperCommand):
    """Exit code 2 means "changes" to CI, so a usage or configuration error (click's and
    typer's own exit 2) exits 1, like every other error."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any
    ) -> Any:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except typer.TyperException as err:  # click's UsageError and BadParameter among them
            _as_error(err)
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except typer.TyperException as err:
            _as_error(err)
            raise


def _as_error(err: Exception) -> None:
    if getattr(err, "exit_code", None) == 2:
        err.exit_code = 1  # type: ignore[attr-defined]


class Format(StrEnum):
    MARKDOWN = "markdown"
    TEXT = "text"
    JSON = "json"


def preview(
    files: list[Path] = typer.Option(
        [], "--file", "-f", help="Spotpool manifest file or directory (repeatable)."
    ),
    removed: list[Path] = typer.Option(
        [],
        "--removed",
        help="A Spotpool manifest the change deletes (its last version; repeatable): previews "
        "the pool's deletion.",
    ),
    all_stacks: bool = typer.Option(
        False,
        "--all-stacks",
        help="Preview every pool's stack with its own config and this tree's stack program.",
    ),
    backend: str | None = typer.Option(
        None, envvar="SPOTPOOL_BACKEND_URL", help="State backend (default: the local one)."
    ),
    cloud_endpoint: str | None = typer.Option(
        None, envvar="SPOTPOOL_CLOUD_ENDPOINT", help="`spotpool emulator` URL; unset: real cloud."
    ),
    work_dir: Path | None = typer.Option(
        None,
        "--work-dir",
        envvar="SPOTPOOL_WORK_DIR",
        help="The operator's per-stack workspaces, read for each stack's settings (default: "
        "the local one); a file another passphrase wrote there is not used.",
    ),
    namespace: str = typer.Option("default", help="Namespace of manifests that name none."),
    output_format: Format = typer.Option(Format.MARKDOWN, "--format"),
    output: Path | None = typer.Option(None, "--output", help="Write here instead of stdout."),
) -> None:
    """Preview Spotpool manifests (or all stacks) without changing anything.

    Exit code: 0 no changes, 2 changes, 1 any error (a pool's, or of usage or configuration).
    The summary counts cloud instances; the details, Pulumi resources. Cloud keys come from
    TENCENTCLOUD_SECRET_ID and TENCENTCLOUD_SECRET_KEY, the stacks' passphrase from
    PULUMI_CONFIG_PASSPHRASE.
    """
    if not files and not all_stacks and not removed:
        raise typer.BadParameter("give --file (manifests), --removed or --all-stacks")
    try:
        settings = EngineSettings.from_env()
    except ValueError as err:  # no passphrase, a bad setting: a configuration error
        raise typer.BadParameter(str(err)) from None
    settings.backend_url = backend or settings.backend_url
    settings.cloud_endpoint = cloud_endpoint or settings.cloud_endpoint
    settings.work_root = work_dir or settings.work_root
    credentials = _credentials()
    found = manifests.find(files, namespace) if files else []
    previews = preview_manifests(found, settings, credentials) if files else []
    if removed:
        previews += preview_removed(manifests.find(removed, namespace), settings)
    if all_stacks:
        previews += preview_stacks(settings, credentials)
    render = {
        Format.MARKDOWN: report.to_markdown,
        Format.TEXT: report.to_text,
        Format.JSON: report.to_json,
    }[output_format]
    text = render(previews)
    if output:
        output.write_text(text)
    else:
        typer.echo(text, nl=False)
    if any(p.error for p in previews):
        raise typer.Exit(1)
    raise typer.Exit(2 if report.has_changes(previews) else 0)


def _credentials() -> Credentials:
    secret_id = os.environ.get("TENCENTCLOUD_SECRET_ID")
    secret_key = os.environ.get("TENCENTCLOUD_SECRET_KEY")
    if not secret_id or not secret_key:
        raise typer.BadParameter(
            "set TENCENTCLOUD_SECRET_ID and TENCENTCLOUD_SECRET_KEY (read-only keys suffice)"
        )
    token = os.environ.get("TENCENTCLOUD_SECURITY_TOKEN")  # temporary keys (CI's OIDC role)
    return Credentials(
        secret_id=SecretStr(secret_id),
        secret_key=SecretStr(secret_key),
        token=SecretStr(token) if token else None,
    )
