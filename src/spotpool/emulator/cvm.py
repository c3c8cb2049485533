"""CVM API 2017-03-12: the actions a pool and the tencentcloud provider use."""

import base64
import binascii
import re
import uuid
from collections.abc import Callable, Collection
from typing import Any

from spotpool.emulator import params
from spotpool.emulator.catalog import INSTANCE_TYPES, PUBLIC_IMAGES, REGIONS, zones
from spotpool.emulator.errors import ApiError, invalid_value
from spotpool.emulator.iam import DEFAULT_ACCOUNT
from spotpool.emulator.instances import Disk, InstanceRecord
from spotpool.emulator.stock import describe_zone_instance_config_infos
from spotpool.emulator.world import Context, default_subnet, default_vpc

_INSTANCE_ID = re.compile(r"^ins-[a-z0-9]{8}$")
_RESOURCE_ID = {
    "ImageId": re.compile(r"^img-[a-z0-9]+$"),
    "VpcId": re.compile(r"^vpc-[a-z0-9]+$"),
    "SubnetId": re.compile(r"^subnet-[a-z0-9]+$"),
    "DisasterRecoverGroupIds": re.compile(r"^ps-[a-z0-9]+$"),
    "SecurityGroupIds": re.compile(r"^sg-[a-z0-9]+$"),
}
CHARGE_TYPES = ("POSTPAID_BY_HOUR", "SPOTPAID")


def check_id(parameter: str, value: str) -> None:
    if not _RESOURCE_ID[parameter].match(value):
        raise invalid_value(parameter, f"`{value}` is not a well-formed id.")


def _check_password(password: str) -> None:
    classes = sum(
        any(test(c) for c in password)
        for test in (str.islower, str.isupper, str.isdigit, lambda c: not c.isalnum())
    )
    if not 8 <= len(password) <= 30 or classes < 3:
        raise ApiError(
            "InvalidPassword",
            "The password must be 8 to 30 characters with at least three of: lower case, "
            "upper case, digits, special characters.",
        )


def _check_user_data(user_data: str) -> None:
    try:
        decoded = base64.b64decode(user_data, validate=True)
    except binascii.Error:
        raise invalid_value("UserData", "it must be base64.") from None
    if len(decoded) > 16 * 1024:
        raise invalid_value("UserData", "it must be at most 16 KB once decoded.")


def _check_run(ctx: Context, p: params.RunInstances) -> None:
    zone = p.placement.zone
    if zone not in zones(ctx.region):
        raise ApiError(
            "InvalidZone.MismatchRegion",
            f"The zone `{zone}` is not in region `{ctx.region}` (its zones: "
            f"{', '.join(zones(ctx.region))}).",
        )
    if p.instance_charge_type not in CHARGE_TYPES:
        raise invalid_value(
            "InstanceChargeType",
            f"`{p.instance_charge_type}`; the emulator sells {' and '.join(CHARGE_TYPES)}.",
        )
    market = p.instance_market_options
    if market is not None:
        if market.market_type != "spot":
            raise invalid_value("InstanceMarketOptions.MarketType", "the only market is `spot`.")
        if p.instance_charge_type != "SPOTPAID":
            raise ApiError(
                "InvalidParameterCombination",
                "InstanceMarketOptions needs InstanceChargeType SPOTPAID.",
            )
        spot = market.spot_options
        if spot is not None:
            if spot.spot_instance_type.lower() != "one-time":
                raise invalid_value("SpotOptions.SpotInstanceType", "only `one-time` is sold.")
            if spot.max_price is not None and not re.match(r"^\d+(\.\d+)?$", spot.max_price):
                raise invalid_value("SpotOptions.MaxPrice", "it must be a decimal number.")
    if p.instance_type not in INSTANCE_TYPES:
        raise ApiError(
            "InvalidParameterValue.InstanceTypeNotFound",
            f"The instance type `{p.instance_type}` is not sold in {zone}.",
        )
    if not _RESOURCE_ID["ImageId"].match(p.image_id):
        raise ApiError("InvalidImageId.Malformed", f"`{p.image_id}` is not a well-formed image id.")
    for group in p.security_group_ids:
        check_id("SecurityGroupIds", group)
    for group in p.disaster_recover_group_ids:
        check_id("DisasterRecoverGroupIds", group)
    vpc = p.virtual_private_cloud
    if vpc is not None:
        if vpc.vpc_id != "DEFAULT":
            check_id("VpcId", vpc.vpc_id)
        if vpc.subnet_id != "DEFAULT":
            check_id("SubnetId", vpc.subnet_id)
    if p.login_settings.password is not None:
        _check_password(p.login_settings.password)
    if p.user_data:
        _check_user_data(p.user_data)


def _take_stock(ctx: Context, p: params.RunInstances, count: int) -> None:
    if p.instance_charge_type != "SPOTPAID":
        return
    store = ctx.world.store
    key = (p.placement.zone, p.instance_type)
    available = store.capacity.get(key)
    if available is None:
        return
    if available < p.instance_count:
        raise ApiError(
            "ResourceInsufficient.SpecifiedInstanceType",
            f"Spot stock of {p.instance_type} in {p.placement.zone} is {available}; "
            f"{p.instance_count} requested.",
        )
    store.set_capacity(*key, available - count)


def _new_instance(ctx: Context, p: params.RunInstances) -> InstanceRecord:
    world = ctx.world
    vpc = p.virtual_private_cloud
    vpc_id = default_vpc(ctx.region) if vpc is None or vpc.vpc_id == "DEFAULT" else vpc.vpc_id
    subnet_id = (
        default_subnet(p.placement.zone)
        if vpc is None or vpc.subnet_id == "DEFAULT"
        else vpc.subnet_id
    )
    internet = p.internet_accessible
    wants_public_ip = (
        internet.public_ip_assigned
        if internet.public_ip_assigned is not None
        else internet.internet_max_bandwidth_out > 0
    )
    tags = {
        tag.key: tag.value
        for spec in p.tag_specification
        if spec.resource_type == "instance"
        for tag in spec.tags
    }
    market = p.instance_market_options
    return InstanceRecord(
        instance_id=world.new_id("ins-"),
        account=ctx.account,
        uuid=str(uuid.uuid4()),
        region=ctx.region,
        zone=p.placement.zone,
        project_id=p.placement.project_id,
        instance_type=p.instance_type,
        charge_type=p.instance_charge_type,
        spot_max_price=market.spot_options.max_price if market and market.spot_options else None,
        image_id=p.image_id,
        name=p.instance_name,
        host_name=p.host_name,
        security_group_ids=p.security_group_ids,
        vpc_id=vpc_id,
        subnet_id=subnet_id,
        private_ip=world.private_ip(),
        public_ip=world.public_ip() if wants_public_ip else None,
        internet_charge_type=internet.internet_charge_type,
        bandwidth_out=internet.internet_max_bandwidth_out,
        system_disk=Disk(
            disk_id=world.new_id("disk-"),
            disk_type=p.system_disk.disk_type,
            disk_size=p.system_disk.disk_size,
        ),
        data_disks=[
            Disk(
                disk_id=world.new_id("disk-"),
                disk_type=d.disk_type,
                disk_size=d.disk_size,
                delete_with_instance=d.delete_with_instance,
            )
            for d in p.data_disks
        ],
        key_ids=p.login_settings.key_ids,  # the password is checked, never kept
        user_data=p.user_data,
        tags=tags,
        disable_api_termination=p.disable_api_termination,
        cam_role_name=p.cam_role_name,
        disaster_recover_group_id=next(iter(p.disaster_recover_group_ids), ""),
        created=ctx.now,
        latest_operation_request_id=ctx.request_id,
        transition_until=ctx.now + world.settings.boot_seconds,
    )


def _token_scope(ctx: Context) -> str:
    """Where a ClientToken is unique: the region, within the caller's account."""
    return ctx.region if ctx.account == DEFAULT_ACCOUNT else f"{ctx.region}@{ctx.account}"


def run_instances(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    p = params.parse(params.RunInstances, body)
    store = ctx.world.store
    if p.client_token is not None:
        earlier = store.created_for(_token_scope(ctx), p.client_token)
        if earlier is not None:
            return {"InstanceIdSet": earlier}
    _check_run(ctx, p)
    if p.dry_run:
        raise ApiError("DryRunOperation", "The request would have succeeded, but DryRun was set.")
    count = ctx.world.misbehaviour.run_count(p.instance_count)  # fewer, on request
    _take_stock(ctx, p, count)
    records = [_new_instance(ctx, p) for _ in range(count)]
    ctx.world.misbehaviour.launched(records, p.instance_count)
    ids = [r.instance_id for r in records]
    ctx.world.touch(*records)
    if p.client_token is not None:
        store.remember_token(_token_scope(ctx), p.client_token, ids)
    return {"InstanceIdSet": ids}


# DescribeInstances filters: name → the values of an instance that the filter compares.
_FILTERS: dict[str, Callable[[InstanceRecord], Collection[str]]] = {
    "zone": lambda r: (r.zone,),
    "project-id": lambda r: (str(r.project_id),),
    "instance-id": lambda r: (r.instance_id,),
    "instance-name": lambda r: (r.name,),
    "instance-state": lambda r: (r.state,),
    "instance-charge-type": lambda r: (r.charge_type,),
    "instance-type": lambda r: (r.instance_type,),
    "image-id": lambda r: (r.image_id,),
    "private-ip-address": lambda r: (r.private_ip,),
    "public-ip-address": lambda r: (r.public_ip,) if r.public_ip else (),
    "vpc-id": lambda r: (r.vpc_id,),
    "subnet-id": lambda r: (r.subnet_id,),
    "security-group-id": lambda r: r.security_group_ids,
    "tag-key": lambda r: r.tags.keys(),
    "tag-value": lambda r: r.tags.values(),
}


def _filter_getter(name: str) -> Callable[[InstanceRecord], Collection[str]]:
    """The function giving an instance's values for filter `name`, or InvalidFilter."""
    if name.startswith("tag:"):
        key = name.removeprefix("tag:")
        return lambda r: (r.tags[key],) if key in r.tags else ()
    getter = _FILTERS.get(name)
    if getter is None:
        names = ", ".join([*_FILTERS, "tag:KEY"])
        raise ApiError("InvalidFilter", f"The filter `{name}` is not supported; use {names}.")
    return getter


def apply_filters(
    records: list[InstanceRecord], filters: list[params.Filter]
) -> list[InstanceRecord]:
    """The records that match every filter (a filter matches when any of its values does)."""
    for f in filters:
        getter = _filter_getter(f.name)  # once per filter, not once per instance
        wanted = frozenset(f.values)
        records = [r for r in records if not wanted.isdisjoint(getter(r))]
    return records


def _check_instance_ids(instance_ids: list[str]) -> None:
    for instance_id in instance_ids:
        if not _INSTANCE_ID.match(instance_id):
            raise ApiError(
                "InvalidInstanceId.Malformed", f"`{instance_id}` is not a well-formed instance id."
            )


def describe_instances(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    p = params.parse(params.DescribeInstances, body)
    if p.instance_ids and p.filters:
        raise ApiError("InvalidParameterCombination", "Give InstanceIds or Filters, not both.")
    _check_instance_ids(p.instance_ids)
    records = ctx.world.listing(ctx.region, ctx.account)
    if p.instance_ids:
        wanted = set(p.instance_ids)
        records = [r for r in records if r.instance_id in wanted]
    records = apply_filters(records, p.filters)
    page = records[p.offset : p.offset + p.limit]
    return {"TotalCount": len(records), "InstanceSet": [ctx.world.view(r) for r in page]}


def describe_instances_status(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    p = params.parse(params.DescribeInstancesStatus, body)
    _check_instance_ids(p.instance_ids)
    records = ctx.world.listing(ctx.region, ctx.account)
    if p.instance_ids:
        records = [r for r in records if r.instance_id in set(p.instance_ids)]
    page = records[p.offset : p.offset + p.limit]
    return {
        "TotalCount": len(records),
        "InstanceStatusSet": [
            {"InstanceId": r.instance_id, "InstanceState": r.state} for r in page
        ],
    }


def found_instances(ctx: Context, instance_ids: list[str]) -> list[InstanceRecord]:
    _check_instance_ids(instance_ids)
    return ctx.world.find(ctx.region, instance_ids, ctx.account)


def terminate_instances(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    p = params.parse(params.InstanceIds, body)
    records = found_instances(ctx, p.instance_ids)
    protected = [r.instance_id for r in records if r.disable_api_termination]
    if protected:
        raise ApiError(
            "OperationDenied.DisableApiTermination",
            f"Termination protection is on for {', '.join(protected)}.",
        )
    ctx.world.terminate(records, ctx.request_id, "terminated")
    return {}


def describe_instances_attributes(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    p = params.parse(params.DescribeInstancesAttributes, body)
    unknown = sorted(set(p.attributes) - {"UserData"})
    if unknown:
        raise invalid_value("Attributes", f"{', '.join(unknown)}; only UserData can be asked for.")
    records = found_instances(ctx, p.instance_ids)
    return {
        "InstanceSet": [
            {"InstanceId": r.instance_id, "Attributes": {"UserData": r.user_data}} for r in records
        ]
    }


def describe_images(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    p = params.parse(params.DescribeImages, body)
    images = [i for i in PUBLIC_IMAGES if not p.image_ids or i.image_id in p.image_ids]
    for f in p.filters:
        if f.name == "image-type":
            images = [i for i in images if "PUBLIC_IMAGE" in f.values]
        elif f.name == "platform":
            images = [i for i in images if i.platform in f.values]
        elif f.name != "image-id":
            raise ApiError("InvalidFilter", f"The image filter `{f.name}` is not supported.")
        else:
            images = [i for i in images if i.image_id in f.values]
    page = images[p.offset : p.offset + p.limit]
    return {
        "TotalCount": len(images),
        "ImageSet": [
            {
                "ImageId": i.image_id,
                "OsName": i.os_name,
                "ImageType": "PUBLIC_IMAGE",
                "CreatedTime": "2025-01-01T00:00:00Z",
                "ImageName": i.name,
                "ImageDescription": i.name,
                "ImageSize": 20,
                "Architecture": "x86_64",
                "ImageState": "NORMAL",
                "Platform": i.platform,
                "ImageCreator": "",
                "ImageSource": "OFFICIAL",
                "SyncPercent": None,
                "IsSupportCloudinit": True,
                "LicenseType": "TencentCloud",
            }
            for i in page
        ],
    }


def describe_regions(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "TotalCount": len(REGIONS),
        "RegionSet": [{"Region": r, "RegionName": r, "RegionState": "AVAILABLE"} for r in REGIONS],
    }


def describe_zones(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    found = zones(ctx.region)
    return {
        "TotalCount": len(found),
        "ZoneSet": [
            {"Zone": z, "ZoneName": z, "ZoneId": str(100000 + n), "ZoneState": "AVAILABLE"}
            for n, z in enumerate(found, 1)
        ],
    }


ACTIONS: dict[str, Callable[[Context, dict[str, Any]], dict[str, Any]]] = {
    "RunInstances": run_instances,
    "DescribeInstances": describe_instances,
    "DescribeInstancesStatus": describe_instances_status,
    "TerminateInstances": terminate_instances,
    "DescribeInstancesAttributes": describe_instances_attributes,
    "DescribeImages": describe_images,
    "DescribeRegions": describe_regions,
    "DescribeZones": describe_zones,
    "DescribeZoneInstanceConfigInfos": describe_zone_instance_config_infos,
}
