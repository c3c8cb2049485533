"""`spotpool notice-agent`: the agent, with its settings as flags or environment variables."""

import os
from pathlib import Path

import typer

from spotpool.notices.agent import METADATA_URL, AgentSettings, main


def notice_agent(
    report_url: str = typer.Option(
        ..., "--report-url", envvar="SPOTPOOL_NOTICE_URL", help="The operator's notice endpoint."
    ),
    pool_uid: str = typer.Option(..., "--pool", envvar="SPOTPOOL_NOTICE_POOL", help="Pool uid."),
    slot: int = typer.Option(..., "--slot", min=0, envvar="SPOTPOOL_NOTICE_SLOT"),
    nonce: str = typer.Option(
        "",
        "--nonce",
        envvar="SPOTPOOL_NOTICE_NONCE",
        help="This instance's generation, as its user data gives it (its token is bound to it).",
    ),
    token_file: Path | None = typer.Option(
        None,
        "--token-file",
        envvar="SPOTPOOL_NOTICE_TOKEN_FILE",
        help="File holding this slot's token (else SPOTPOOL_NOTICE_TOKEN; never a flag: argv "
        "is visible to every process).",
    ),
    metadata_url: str = typer.Option(
        METADATA_URL,
        "--metadata-url",
        envvar="SPOTPOOL_METADATA_URL",
        help="Base of the instance metadata (spot/termination-time, instance-id are read below "
        "it); the emulator's is <endpoint>/_emulator/metadata/<instance-id>/.",
    ),
    instance_id: str | None = typer.Option(
        None,
        "--instance-id",
        envvar="SPOTPOOL_INSTANCE_ID",
        help="This instance's id (default: asked of the metadata service).",
    ),
    interval: float = typer.Option(
        5.0, "--interval", min=0.2, envvar="SPOTPOOL_NOTICE_INTERVAL", help="Seconds per poll."
    ),
) -> None:
    """Run on a spot instance: report the cloud's termination notice to the operator, so the
    instance's replacement starts before the reclaim."""
    if token_file is not None:
        token = token_file.read_text().strip()
    else:
        token = os.environ.get("SPOTPOOL_NOTICE_TOKEN", "")
    if not token:
        raise typer.BadParameter(
            "no token: set SPOTPOOL_NOTICE_TOKEN or --token-file (the pool's user data "
            "writes it to /etc/spotpool/notice-agent.env)",
            param_hint="--token-file",
        )
    env = {
        "SPOTPOOL_NOTICE_URL": report_url,
        "SPOTPOOL_NOTICE_TOKEN": token,
        "SPOTPOOL_NOTICE_POOL": pool_uid,
        "SPOTPOOL_NOTICE_SLOT": str(slot),
        "SPOTPOOL_NOTICE_NONCE": nonce,
        "SPOTPOOL_METADATA_URL": metadata_url,
        "SPOTPOOL_INSTANCE_ID": instance_id or "",
        "SPOTPOOL_NOTICE_INTERVAL": str(interval),
    }
    AgentSettings.from_env(env)  # fails early, naming what is missing
    os.environ.update(env)
    raise typer.Exit(main())
