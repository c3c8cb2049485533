"""`spotpool emulator serve | reclaim | price | capacity | iam | instances | misbehave`: run the
local Tencent Cloud, take spot instances back, move a spot price, sell a zone out, add
identities, list what runs where, make it misbehave."""

import asyncio
import json
import logging
import signal
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from spotpool.emulator.server import Emulator

# The server's modules (aiohttp, the world, SQLite) are imported by `serve` alone: the admin
# commands are a second's worth of HTTP, not worth their import on a busy machine.

# Well-known, documented keys like LocalStack's "test"/"test": the emulator guards nothing real.
DEFAULT_SECRET_ID = "AKIDspotpoolEMULATOR0000000000000000"
DEFAULT_SECRET_KEY = "spotpool-emulator-secret-key-0000"

# The misbehaviour options, the same for `serve` and `misbehave` (docs/emulator.md).
_LOSE_ANSWERS = (
    "A share (0-1) of the calls of --lose-answers-actions take full effect, then their "
    "connection is reset with no answer, as when an answer is lost on a real network."
)
_LOSE_ANSWERS_ACTIONS = "The actions whose answers --lose-answers loses, comma-separated."
_LISTING_LAG = (
    "DescribeInstances and DescribeInstancesStatus lag this many seconds: an instance younger "
    "than that is not listed yet, one that went less than that ago is listed as it was."
)
_PARTIAL_RUNS = "A share (0-1) of RunInstances asking for 2 or more make fewer (at least 1)."
_LAUNCH_FAILURES = "A share (0-1) of launched instances end in LAUNCH_FAILED, not RUNNING."
_THROTTLE = "A share (0-1) of all API calls answer RequestLimitExceeded and do nothing."
_SERVER_ERRORS = "A share (0-1) of all API calls answer InternalError and do nothing."
_HTTP_503 = "A share (0-1) of all API calls get a load balancer's bare HTTP 503 and do nothing."

app = typer.Typer(help="A local Tencent Cloud API emulator (CVM with spot).", no_args_is_help=True)


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(9000, help="Port to listen on (0 picks a free one)."),
    state: Path = typer.Option(
        Path("emulator-state.db"), help="SQLite file holding the cloud; reused on restart."
    ),
    secret_id: str = typer.Option(
        DEFAULT_SECRET_ID, envvar="TENCENTCLOUD_SECRET_ID", help="SecretId the API accepts."
    ),
    secret_key: str = typer.Option(
        DEFAULT_SECRET_KEY,
        envvar="TENCENTCLOUD_SECRET_KEY",
        help="SecretKey for signatures (prefer the environment variable: argv is visible).",
        show_default=False,
    ),
    boot_seconds: float = typer.Option(5.0, min=0, help="PENDING → RUNNING and other transitions."),
    reclaim_rate: float = typer.Option(
        0.0, min=0, help="Random spot reclaims, per running spot instance per hour."
    ),
    reclaim_rates: list[str] = typer.Option(
        [],
        "--reclaim-rates",
        help="Random spot reclaims of one zone x type, per running instance per hour, in place "
        "of --reclaim-rate there: ZONE/TYPE=RATE/h, e.g. ap-guangzhou-3/GN7.2XLARGE32=6/h "
        "(repeat for more).",
    ),
    seed: int | None = typer.Option(
        None, help="Seed of the random reclaims (the same seed draws the same sequence)."
    ),
    reclaim_notice_seconds: float = typer.Option(
        0.0, min=0, help="How long a reclaimed instance keeps running after its notice."
    ),
    rate_limits: bool = typer.Option(
        False,
        "--rate-limits/--no-rate-limits",
        envvar="SPOTPOOL_EMULATOR_RATE_LIMITS",
        help="Enforce Tencent Cloud's per-action request limits per account and region "
        "(RunInstances 10/s, DescribeInstances 40/s, TerminateInstances 10/s, others 20/s), "
        "answering RequestLimitExceeded over them; also switchable at /_emulator/rate-limits.",
    ),
    spot_prices: Path | None = typer.Option(
        None,
        help="Initial spot prices: a JSON list of {Zone, InstanceType, Price} (an hourly price; "
        "unlisted zone x types cost 20% of on-demand).",
    ),
    price_drift: float = typer.Option(
        0.0,
        min=0,
        max=1,
        help="Spot prices move: every --price-drift-seconds each zone x type's price takes a "
        "random step of at most this fraction (0: prices stay put).",
    ),
    price_drift_seconds: float = typer.Option(60.0, min=0.1, help="Period of a drift step."),
    iam: Path | None = typer.Option(
        None,
        help="Identities beyond the emulator's own key pair (account 100000000001): a JSON "
        "{Keys: [{Account, SecretId, SecretKey, Allow, Deny}], Roles: [{Account, RoleName, "
        "TrustedAccounts, TrustedOidc: [{Issuer, Subjects}], ExternalId}], OidcProviders: "
        "[{Name, Issuer, ClientIds, Jwks}]}; also settable at /_emulator/iam.",
    ),
    sts_max_lifetime: int | None = typer.Option(
        None,
        min=1,
        help="STS temporary keys live at most this many seconds, whatever DurationSeconds "
        "asks (tests of renewal use a minute; unset: as asked, up to 12 h).",
    ),
    lose_answers: float = typer.Option(0.0, min=0, max=1, help=_LOSE_ANSWERS),
    lose_answers_actions: str = typer.Option(
        "RunInstances,TerminateInstances", help=_LOSE_ANSWERS_ACTIONS
    ),
    listing_lag: float = typer.Option(0.0, min=0, max=3600, help=_LISTING_LAG),
    partial_runs: float = typer.Option(0.0, min=0, max=1, help=_PARTIAL_RUNS),
    launch_failures: float = typer.Option(0.0, min=0, max=1, help=_LAUNCH_FAILURES),
    throttle: float = typer.Option(0.0, min=0, max=1, help=_THROTTLE),
    server_errors: float = typer.Option(0.0, min=0, max=1, help=_SERVER_ERRORS),
    http_503: float = typer.Option(0.0, "--http-503", min=0, max=1, help=_HTTP_503),
) -> None:
    """Serve the Tencent Cloud API 3.0 (cvm, tag, cbs, vpc, sts) and the /_emulator admin
    routes."""
    from spotpool.emulator.iam import IamSettings
    from spotpool.emulator.limits import LimitSettings
    from spotpool.emulator.misbehaviour import Misbehaviour
    from spotpool.emulator.reclaim_rates import parse_rates
    from spotpool.emulator.server import Emulator
    from spotpool.emulator.store import CloudStore
    from spotpool.emulator.world import Settings, World

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    settings = Settings(
        boot_seconds=boot_seconds,
        reclaim_notice_seconds=reclaim_notice_seconds,
        keys={secret_id: secret_key},
    )
    world = World(CloudStore(state), settings)
    world.prices.drift, world.prices.drift_seconds = price_drift, price_drift_seconds
    if iam is not None:
        try:
            world.iam.configure(IamSettings.model_validate_json(iam.read_bytes()))
        except (OSError, ValueError) as error:
            raise typer.BadParameter(str(error), param_hint="--iam") from None
    if sts_max_lifetime is not None:
        world.iam.max_lifetime = sts_max_lifetime
    if spot_prices is not None:
        try:
            world.prices.load(spot_prices)
        except (OSError, ValueError) as error:
            raise typer.BadParameter(str(error), param_hint="--spot-prices") from None

    try:
        rates = parse_rates(reclaim_rates)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--reclaim-rates") from None
    try:
        misbehaviour = Misbehaviour.model_validate(
            _misbehaviour_changes(
                lose_answers, lose_answers_actions, listing_lag, partial_runs, launch_failures,
                throttle, server_errors, http_503,
            )
        )  # fmt: skip
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--throttle / --server-errors") from None
    emulator = Emulator(
        world,
        reclaim_rate_per_hour=reclaim_rate,
        limits=LimitSettings(enabled=rate_limits),
        reclaim_rates=rates,
        seed=seed,
        misbehaviour=misbehaviour,
    )
    asyncio.run(_serve(emulator, host, port, state))


async def _serve(emulator: "Emulator", host: str, port: int, state: Path) -> None:
    """Serve until SIGTERM or SIGINT, then close the state file cleanly."""
    from aiohttp import web

    from spotpool.emulator.server import build_app

    runner = web.AppRunner(build_app(emulator), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound_port = runner.addresses[0][1]
    logging.getLogger("spotpool.emulator").info(
        "serving the Tencent Cloud API on http://%s:%d (state %s, %d instances)",
        host,
        bound_port,
        state,
        len(emulator.world.store.instances),
    )
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await stop.wait()
    await runner.cleanup()
    emulator.world.store.close()


@app.command()
def reclaim(
    endpoint: str = typer.Option(..., help="The emulator, e.g. http://127.0.0.1:9000."),
    instance_id: list[str] = typer.Option([], "--instance-id", help="Reclaim this instance."),
    count: int | None = typer.Option(None, min=1, help="Reclaim this many spot instances."),
    zone: str | None = typer.Option(None, help="With --count: only in this zone."),
) -> None:
    """Take spot instances back, the way the cloud does when it needs the capacity."""
    if bool(instance_id) == (count is not None):
        raise typer.BadParameter("give either --instance-id (one or more) or --count")
    body: dict[str, object] = (
        {"InstanceIds": instance_id} if instance_id else {"Count": count, "Zone": zone}
    )
    for reclaimed_id in _post(endpoint, "/_emulator/reclaim", body)["Reclaimed"]:
        typer.echo(reclaimed_id)


@app.command()
def price(
    endpoint: str = typer.Option(..., help="The emulator, e.g. http://127.0.0.1:9000."),
    zone: str = typer.Option(..., help="Zone, e.g. ap-singapore-2."),
    instance_type: str = typer.Option(..., help="Instance type, e.g. GN7.2XLARGE32."),
    spot_price: float | None = typer.Option(
        None, "--price", min=0, help="New hourly spot price (omit to go back to the default)."
    ),
) -> None:
    """Set a zone x type's spot price; spot instances launched with a lower max price are
    reclaimed, as the cloud does (their ids are printed)."""
    body: dict[str, object] = {"Zone": zone, "InstanceType": instance_type, "Price": spot_price}
    for reclaimed_id in _post(endpoint, "/_emulator/prices", body)["Reclaimed"]:
        typer.echo(reclaimed_id)


@app.command()
def capacity(
    endpoint: str = typer.Option(..., help="The emulator, e.g. http://127.0.0.1:9000."),
    zone: str = typer.Option(..., help="Zone, e.g. ap-singapore-2."),
    instance_type: str = typer.Option(..., help="Instance type, e.g. GN7.2XLARGE32."),
    available: int | None = typer.Option(
        None, min=0, help="Spot instances it still sells (0: sold out; omit to lift the limit)."
    ),
) -> None:
    """Set a zone x type's spot stock: launches beyond it fail with ResourceInsufficient."""
    body: dict[str, object] = {"Zone": zone, "InstanceType": instance_type, "Available": available}
    _post(endpoint, "/_emulator/capacity", body)
    said = "no limit" if available is None else f"{available} available"
    typer.echo(f"{zone} {instance_type}: {said}")


@app.command()
def iam(
    endpoint: str = typer.Option(..., help="The emulator, e.g. http://127.0.0.1:9000."),
    file: Path = typer.Option(
        ..., "--file", "-f", help="The body `serve --iam` takes: Keys, Roles, OidcProviders."
    ),
) -> None:
    """Add accounts' key pairs, roles (trust policies) and OIDC providers to a running
    emulator (a role of the same ARN is replaced); prints the identities it then holds."""
    from spotpool.emulator.iam import IamSettings

    try:
        body = IamSettings.model_validate_json(file.read_bytes())
    except (OSError, ValueError) as error:
        raise typer.BadParameter(str(error), param_hint="--file") from None
    reply = _post(endpoint, "/_emulator/iam", body.model_dump(by_alias=True, exclude_none=True))
    for role in reply.get("Roles") or []:
        typer.echo(f"role qcs::cam::uin/{role.get('Account')}:roleName/{role.get('RoleName')}")
    for provider in reply.get("OidcProviders") or []:
        typer.echo(f"oidc provider {provider.get('Name')}: {provider.get('Issuer')}")


@app.command()
def instances(
    endpoint: str = typer.Option(..., help="The emulator, e.g. http://127.0.0.1:9000."),
    every: bool = typer.Option(False, "--all", help="Also terminated and reclaimed ones."),
) -> None:
    """List the cloud's instances: the account each runs in, its zone, type, charge type,
    state, and the pool its tags name."""
    request = urllib.request.Request(endpoint.rstrip("/") + "/_emulator/instances")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            listed: list[dict[str, Any]] = json.load(response)["Instances"]
    except urllib.error.URLError as error:
        typer.echo(f"cannot reach the emulator at {endpoint}: {error.reason}", err=True)
        raise typer.Exit(1) from None
    rows = [("INSTANCE", "ACCOUNT", "ZONE", "TYPE", "CHARGE", "STATE", "POOL")]
    for item in listed:
        if item.get("Gone") and not every:
            continue
        tags = {t.get("Key"): t.get("Value") for t in item.get("Tags") or []}
        pool = tags.get("spotpool-pool", "")
        state = item.get("GoneReason") or item.get("InstanceState") or ""
        rows.append(
            (item.get("InstanceId", ""), item.get("Account", ""), item.get("Zone", ""),
             item.get("InstanceType", ""), item.get("InstanceChargeType", ""), state, pool)
        )  # fmt: skip
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


@app.command()
def misbehave(
    endpoint: str = typer.Option(..., help="The emulator, e.g. http://127.0.0.1:9000."),
    lose_answers: float | None = typer.Option(None, min=0, max=1, help=_LOSE_ANSWERS),
    lose_answers_actions: str | None = typer.Option(None, help=_LOSE_ANSWERS_ACTIONS),
    listing_lag: float | None = typer.Option(None, min=0, max=3600, help=_LISTING_LAG),
    partial_runs: float | None = typer.Option(None, min=0, max=1, help=_PARTIAL_RUNS),
    launch_failures: float | None = typer.Option(None, min=0, max=1, help=_LAUNCH_FAILURES),
    throttle: float | None = typer.Option(None, min=0, max=1, help=_THROTTLE),
    server_errors: float | None = typer.Option(None, min=0, max=1, help=_SERVER_ERRORS),
    http_503: float | None = typer.Option(None, "--http-503", min=0, max=1, help=_HTTP_503),
    clear: bool = typer.Option(
        False, "--clear", help="First back to a perfect cloud, the counters at 0."
    ),
) -> None:
    """Make a running emulator lose answers, lag, fail launches, throttle (only the options
    given change); prints its misbehaviour settings and counters then, as JSON."""
    path = "/_emulator/misbehaviour"
    reply = _request(endpoint, path, method="DELETE") if clear else None
    changes = _misbehaviour_changes(
        lose_answers, lose_answers_actions, listing_lag, partial_runs, launch_failures, throttle,
        server_errors, http_503,
    )  # fmt: skip
    if changes:
        reply = _post(endpoint, path, changes)
    elif reply is None:
        reply = _request(endpoint, path, method="GET")
    typer.echo(json.dumps(reply, indent=2))


def _misbehaviour_changes(
    lose_answers: float | None,
    lose_answers_actions: str | None,
    listing_lag: float | None,
    partial_runs: float | None,
    launch_failures: float | None,
    throttle: float | None,
    server_errors: float | None,
    http_503: float | None,
) -> dict[str, object]:
    """The `/_emulator/misbehaviour` body of the options given (None: not given)."""
    lose: dict[str, object] = {}
    if lose_answers is not None:
        lose["Rate"] = lose_answers
    if lose_answers_actions is not None:
        lose["Actions"] = [a.strip() for a in lose_answers_actions.split(",") if a.strip()]
    changes: dict[str, object] = {"LoseAnswers": lose} if lose else {}
    for name, value in (
        ("ListingLagSeconds", listing_lag),
        ("PartialRunRate", partial_runs),
        ("LaunchFailedRate", launch_failures),
        ("ThrottleRate", throttle),
        ("ServerErrorRate", server_errors),
        ("Http503Rate", http_503),
    ):
        if value is not None:
            changes[name] = value
    return changes


def _post(endpoint: str, path: str, body: dict[str, object]) -> dict[str, Any]:
    return _request(endpoint, path, body)


def _request(
    endpoint: str, path: str, body: dict[str, object] | None = None, method: str = "POST"
) -> dict[str, Any]:
    request = urllib.request.Request(
        endpoint.rstrip("/") + path,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method=method,
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            reply: dict[str, Any] = json.load(response)
            return reply
    except urllib.error.HTTPError as error:
        typer.echo(f"the emulator refused: {json.load(error).get('Error', error.reason)}", err=True)
        raise typer.Exit(1) from None
    except urllib.error.URLError as error:
        typer.echo(f"cannot reach the emulator at {endpoint}: {error.reason}", err=True)
        raise typer.Exit(1) from None
