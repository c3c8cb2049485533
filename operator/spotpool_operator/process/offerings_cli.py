"""`spotpool offerings`: each zone x instance type a pool could be placed on, with its spot
price and stock (one DescribeZoneInstanceConfigInfos) and the interruption rate the operator
learned there (its ConfigMap), ranked as placement ranks them."""

import json
from enum import StrEnum
from typing import Any

import typer
from pydantic import SecretStr
from rich.console import Console
from rich.table import Table

from spotpool.api.interruptions import account_digest
from spotpool.api.placement import Wants
from spotpool.api.placement_report import offerings as ranked_offerings
from spotpool.api.spec import ChargeType, PlacementStrategy, SpotpoolSpec, parse_duration
from spotpool.api.status import PlacedOffering


class Output(StrEnum):
    table = "table"
    json = "json"


def _pool_spec(reference: str) -> tuple[str, SpotpoolSpec]:
    """(namespace, spec) of the Spotpool NAMESPACE/NAME."""
    import kubernetes

    from spotpool.api.spec import GROUP, PLURAL, VERSION
    from spotpool_operator.reporting.kube import KubeCluster

    namespace, _, name = reference.partition("/")
    if not namespace or not name:
        raise typer.BadParameter("give the pool as NAMESPACE/NAME", param_hint="--pool")
    cluster = KubeCluster()
    custom: Any = kubernetes.client.CustomObjectsApi(cluster.core().api_client)
    try:
        body = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    except kubernetes.client.ApiException as error:
        raise typer.BadParameter(
            f"reading Spotpool {reference}: the cluster answered {error.status} {error.reason}",
            param_hint="--pool",
        ) from None
    return namespace, SpotpoolSpec.model_validate(body["spec"])


def _learned(
    lease_namespace: str, lease_name: str, half_life: float, account: str, region: str
) -> dict[tuple[str, str], Any]:
    """What the install learned, from its ConfigMap ({} with a warning when unreadable)."""
    from spotpool_operator.cloud.interruptions import ConfigMapStore, Learner, LearnerSettings
    from spotpool_operator.reporting.kube import KubeCluster

    try:
        store = ConfigMapStore(KubeCluster().core(), lease_namespace, f"{lease_name}-interruptions")
        learner = Learner(store, "spotpool-offerings", LearnerSettings(half_life=half_life))
        learner.load()
        return learner.of(account, region)
    except Exception as error:  # no cluster, or no right to read it: prices and stock alone
        typer.echo(
            f"no learned rates ({type(error).__name__} reading ConfigMap "
            f"{lease_namespace}/{lease_name}-interruptions): showing price and stock only",
            err=True,
        )
        return {}


def offerings(
    pool: str | None = typer.Option(
        None,
        "--pool",
        help="NAMESPACE/NAME: take region, zones, types, strategy and "
        "interruptionCostHours from this Spotpool (and its credentials Secret).",
    ),
    region: str | None = typer.Option(None, "--region", help="Region, e.g. ap-singapore."),
    zone: list[str] = typer.Option([], "--zone", help="Availability zone (repeat)."),
    instance_type: list[str] = typer.Option([], "--instance-type", help="Type (repeat)."),
    strategy: PlacementStrategy = typer.Option(
        PlacementStrategy.LOWEST_INTERRUPTION_COST, "--strategy", help="Rank as this strategy."
    ),
    interruption_cost_hours: float = typer.Option(
        1.0, "--interruption-cost-hours", min=0, help="Instance-hours one interruption costs."
    ),
    secret_id: str | None = typer.Option(
        None, envvar="TENCENTCLOUD_SECRET_ID", help="SecretId (without --pool)."
    ),
    secret_key: str | None = typer.Option(
        None,
        envvar="TENCENTCLOUD_SECRET_KEY",
        help="SecretKey (prefer the environment variable: argv is visible).",
        show_default=False,
    ),
    cloud_endpoint: str | None = typer.Option(
        None, envvar="SPOTPOOL_CLOUD_ENDPOINT", help="The emulator's URL (unset: Tencent Cloud)."
    ),
    lease_namespace: str = typer.Option(
        "spotpool-system",
        "--lease-namespace",
        envvar="SPOTPOOL_LEASE_NAMESPACE",
        help="The operator's namespace (its ConfigMap <lease-name>-interruptions).",
    ),
    lease_name: str = typer.Option(
        "spotpool-operator", "--lease-name", envvar="SPOTPOOL_LEASE_NAME", help="Lease base name."
    ),
    half_life: str = typer.Option(
        "6h",
        "--interruption-half-life",
        envvar="SPOTPOOL_INTERRUPTION_HALF_LIFE",
        help="As the operator's: an interruption this long ago counts half.",
    ),
    output: Output = typer.Option(Output.table, "--output", help="table or json."),
) -> None:
    """Each zone x type's spot price, stock and learned interruption rate, ranked."""
    from spotpool.engine.tencent import cloud, stock
    from spotpool.engine.tencent.credentials import Credentials

    if pool is not None:
        namespace, spec = _pool_spec(pool)
        from spotpool_operator.basics.credentials import resolve
        from spotpool_operator.reporting.kube import KubeCluster

        credentials = resolve(KubeCluster(), namespace, pool.partition("/")[2], spec)
        region, zones, types = spec.region, spec.zones(), spec.types()
        strategy, interruption_cost_hours = spec.placement_strategy, spec.interruption_cost_hours
    else:
        if not region or not zone or not instance_type:
            raise typer.BadParameter("give --pool, or --region, --zone and --instance-type")
        if not secret_id or not secret_key:
            raise typer.BadParameter(
                "set TENCENTCLOUD_SECRET_ID and TENCENTCLOUD_SECRET_KEY (or give --pool)"
            )
        credentials = Credentials(secret_id=SecretStr(secret_id), secret_key=SecretStr(secret_key))
        zones, types = zone, instance_type
    try:  # as the operator's flag: plain seconds, or 30m / 6h
        seconds = float(half_life) if half_life.replace(".", "", 1).isdigit() else None
        seconds = seconds if seconds is not None else parse_duration(half_life)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--interruption-half-life") from None
    client = cloud.cvm(credentials, region, cloud_endpoint or None)
    try:
        found = stock.offerings(client, zones, types, [ChargeType.SPOTPAID])
    except Exception as error:
        code = getattr(error, "code", None) or type(error).__name__
        raise typer.BadParameter(
            f"the cloud refused DescribeZoneInstanceConfigInfos: {code}"
        ) from None
    account = account_digest(credentials.secret_id.get_secret_value(), cloud_endpoint or None)
    wants = Wants(
        zones=zones,
        types=types,
        stock=found,
        strategy=strategy,
        learned=_learned(lease_namespace, lease_name, seconds, account, region),
        interruption_cost_hours=interruption_cost_hours,
    )
    rows = ranked_offerings(wants)
    if output is Output.json:
        typer.echo(json.dumps([r.model_dump(mode="json", by_alias=True) for r in rows], indent=2))
        return
    console = Console()
    if not console.is_terminal:  # piped or logged: whole lines, not the default 80 columns
        console = Console(width=200)
    console.print(_table(rows, region, strategy))


def _table(rows: list[PlacedOffering], region: str, strategy: PlacementStrategy) -> Table:
    table = Table(
        "zone", "type", "price/h", "stock", "interruptions/h", "observed h", "score", "note",
        title=f"{region}, ranked by {strategy.value} (best first)",
    )  # fmt: skip
    for r in rows:
        table.add_row(
            r.zone, r.instance_type,
            "-" if r.price is None else f"{r.price:.4f}",
            r.stock or "-",
            f"{r.interruption_rate:.3f}",
            f"{r.observed_hours:.1f}",
            "-" if r.score is None else f"{r.score:.4f}",
            r.note or "",
        )  # fmt: skip
    return table
