"""The other services the tencentcloud provider calls for an instance: tag, cbs and vpc (the tag
service's pairs of their own: tag_pairs.py)."""

import re
from collections.abc import Callable
from typing import Any

from spotpool.emulator import params, tag_pairs
from spotpool.emulator.errors import ApiError
from spotpool.emulator.instances import Disk, InstanceRecord
from spotpool.emulator.world import Context

Handler = Callable[[Context, dict[str, Any]], dict[str, Any]]

# Six-segment resource names: qcs::cvm:ap-guangzhou:uin/123:instance/ins-abcdefgh
_RESOURCE = re.compile(
    r"^qcs::(?P<service>[a-z]+):(?P<region>[a-z-]*):uin/\d*:(?P<prefix>[a-z]+)/(?P<id>[\w-]+)$"
)


def _owned_disks(ctx: Context) -> list[tuple[InstanceRecord, Disk]]:
    return [
        (r, d)
        for r in ctx.world.live(ctx.region, ctx.account)
        for d in (r.system_disk, *r.data_disks)
    ]


def _tags_of(
    ctx: Context, region: str, prefix: str, resource_id: str
) -> tuple[InstanceRecord, dict[str, str]] | None:
    for r in ctx.world.live(region, ctx.account):
        if prefix == "instance" and r.instance_id == resource_id:
            return r, r.tags
        if prefix == "volume" and resource_id in {
            d.disk_id for d in (r.system_disk, *r.data_disks)
        }:
            return r, r.disk_tags.setdefault(resource_id, {})
    return None


def _resource(ctx: Context, name: str) -> tuple[InstanceRecord, dict[str, str]]:
    match = _RESOURCE.match(name)
    if match is None:
        raise ApiError(
            "InvalidParameterValue.ResourceDescriptionError",
            f"`{name}` is not a resource name of the form qcs::cvm:REGION:uin/:instance/ID.",
        )
    region = match["region"] or ctx.region
    found = None
    # Disks are named both ways: the provider (v1.81) tags them as `cvm` volumes.
    if (match["service"], match["prefix"]) in {
        ("cvm", "instance"),
        ("cvm", "volume"),
        ("cbs", "volume"),
    }:
        found = _tags_of(ctx, region, match["prefix"], match["id"])
    if found is None:
        raise ApiError("ResourceNotFound", f"The resource `{name}` does not exist.")
    return found


def modify_resource_tags(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    p = params.parse(params.ModifyResourceTags, body)
    record, tags = _resource(ctx, p.resource)
    for tag in p.delete_tags:
        tags.pop(tag.tag_key, None)
    for kv in p.replace_tags:
        tags[kv.tag_key] = kv.tag_value
    ctx.world.touch(record)
    return {}


def tag_resources(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    resources = body.get("ResourceList") or []
    tags = [params.TagKeyValue.model_validate(t) for t in body.get("Tags") or []]
    for name in resources:
        record, current = _resource(ctx, str(name))
        current.update({t.tag_key: t.tag_value for t in tags})
        ctx.world.touch(record)
    return {"FailedResources": []}


def untag_resources(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    for name in body.get("ResourceList") or []:
        record, current = _resource(ctx, str(name))
        for key in body.get("TagKeys") or []:
            current.pop(str(key), None)
        ctx.world.touch(record)
    return {"FailedResources": []}


def describe_resource_tags_by_resource_ids(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    p = params.parse(params.DescribeResourceTagsByResourceIds, body)
    region = p.resource_region or ctx.region
    rows = []
    for resource_id in p.resource_ids:
        found = _tags_of(ctx, region, p.resource_prefix, resource_id)
        if found is not None and p.service_type in ("cvm", "cbs"):
            rows += [
                {"TagKey": k, "TagValue": v, "ResourceId": resource_id, "Category": "Custom"}
                for k, v in found[1].items()
            ]
    return {
        "TotalCount": len(rows),
        "Offset": p.offset,
        "Limit": p.limit,
        "Tags": rows[p.offset : p.offset + p.limit],
    }


def describe_disks(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    p = params.parse(params.DescribeDisks, body)
    pairs = _owned_disks(ctx)
    if p.disk_ids:
        pairs = [(r, d) for r, d in pairs if d.disk_id in p.disk_ids]
    for f in p.filters:
        match f.name:
            case "disk-id":
                pairs = [(r, d) for r, d in pairs if d.disk_id in f.values]
            case "instance-id":
                pairs = [(r, d) for r, d in pairs if r.instance_id in f.values]
            case "zone":
                pairs = [(r, d) for r, d in pairs if r.zone in f.values]
            case _:
                raise ApiError("InvalidFilter", f"The disk filter `{f.name}` is not supported.")
    page = pairs[p.offset : p.offset + p.limit]
    return {
        "TotalCount": len(pairs),
        "DiskSet": [
            {
                "DiskId": d.disk_id,
                "DiskType": d.disk_type,
                "DiskSize": d.disk_size,
                "DiskUsage": "SYSTEM_DISK" if d is r.system_disk else "DATA_DISK",
                "DiskState": "ATTACHED",
                "DiskChargeType": "POSTPAID_BY_HOUR",
                "DiskName": d.disk_id,
                "InstanceId": r.instance_id,
                "InstanceIdList": [r.instance_id],
                "Attached": True,
                "Portable": d is not r.system_disk,
                "DeleteWithInstance": d.delete_with_instance,
                "Encrypt": False,
                "KmsKeyId": "",
                "Placement": {"Zone": r.zone, "ProjectId": r.project_id},
                "Tags": [{"Key": k, "Value": v} for k, v in r.disk_tags.get(d.disk_id, {}).items()],
                "ThroughputPerformance": 0,
            }
            for r, d in page
        ],
    }


def describe_used_ip_address(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    p = params.parse(params.DescribeUsedIpAddress, body)
    used = [
        r
        for r in ctx.world.live(ctx.region, ctx.account)
        if r.vpc_id == p.vpc_id and (p.subnet_id is None or r.subnet_id == p.subnet_id)
    ]
    if p.ip_addresses:
        used = [r for r in used if r.private_ip in p.ip_addresses]
    page = used[p.offset : p.offset + p.limit]
    return {
        "TotalCount": len(used),
        "IpAddressStates": [
            {
                "VpcId": r.vpc_id,
                "SubnetId": r.subnet_id,
                "IpAddress": r.private_ip,
                "ResourceType": "cvm",
                "ResourceId": r.instance_id,
            }
            for r in page
        ],
    }


TAG_ACTIONS: dict[str, Handler] = {
    "DescribeResourceTagsByResourceIds": describe_resource_tags_by_resource_ids,
    "ModifyResourceTags": modify_resource_tags,
    "TagResources": tag_resources,
    "UnTagResources": untag_resources,
    **tag_pairs.ACTIONS,  # pairs of their own: CreateTag, DeleteTag, DescribeTagValues, …
}
CBS_ACTIONS: dict[str, Handler] = {"DescribeDisks": describe_disks}
VPC_ACTIONS: dict[str, Handler] = {"DescribeUsedIpAddress": describe_used_ip_address}
