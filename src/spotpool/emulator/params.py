"""Request parameters of the emulated actions, named as the API names them (PascalCase).

Parameters the emulator does not model are ignored, so a newer client never breaks on an
extra field; missing or mistyped ones get the API's error codes.
"""

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_pascal

from spotpool.emulator.errors import ApiError


class Params(BaseModel):
    model_config = ConfigDict(alias_generator=to_pascal, populate_by_name=True, extra="ignore")


class Filter(Params):
    name: str
    values: list[str]


class Paging(Params):
    offset: int = Field(0, ge=0)
    limit: int = Field(20, ge=1, le=100)


class Tag(Params):
    key: str
    value: str = ""


class TagSpecification(Params):
    resource_type: str
    tags: list[Tag] = Field(default_factory=list)


class Placement(Params):
    zone: str
    project_id: int = 0


class SpotOptions(Params):
    max_price: str | None = None
    spot_instance_type: str = "one-time"


class MarketOptions(Params):
    market_type: str
    spot_options: SpotOptions | None = None


class VirtualPrivateCloud(Params):
    vpc_id: str
    subnet_id: str
    private_ip_addresses: list[str] | None = None


class SystemDisk(Params):
    disk_type: str = "CLOUD_PREMIUM"
    disk_size: int = Field(50, ge=20, le=1024)


class DataDisk(Params):
    disk_type: str = "CLOUD_PREMIUM"
    disk_size: int = Field(ge=10, le=32000)
    delete_with_instance: bool = True


class InternetAccessible(Params):
    internet_charge_type: str = "TRAFFIC_POSTPAID_BY_HOUR"
    internet_max_bandwidth_out: int = Field(0, ge=0, le=1000)
    public_ip_assigned: bool | None = None


class LoginSettings(Params):
    password: str | None = None
    key_ids: list[str] = Field(default_factory=list)
    keep_image_login: str | None = None


class RunInstances(Params):
    placement: Placement
    image_id: str
    instance_charge_type: str = "POSTPAID_BY_HOUR"
    instance_market_options: MarketOptions | None = None
    instance_type: str = "S5.SMALL1"
    instance_count: int = Field(1, ge=1, le=100)
    instance_name: str = "Unnamed"
    host_name: str = ""
    system_disk: SystemDisk = Field(default_factory=SystemDisk)
    data_disks: list[DataDisk] = Field(default_factory=list)
    virtual_private_cloud: VirtualPrivateCloud | None = None
    internet_accessible: InternetAccessible = Field(default_factory=InternetAccessible)
    login_settings: LoginSettings = Field(default_factory=LoginSettings)
    security_group_ids: list[str] = Field(default_factory=list)
    tag_specification: list[TagSpecification] = Field(default_factory=list)
    user_data: str = ""
    client_token: str | None = Field(None, max_length=64)
    disable_api_termination: bool = False
    dry_run: bool = False
    cam_role_name: str = Field("", max_length=128)
    disaster_recover_group_ids: list[str] = Field(default_factory=list, max_length=1)


class DescribeInstances(Paging):
    instance_ids: list[str] = Field(default_factory=list, max_length=100)
    filters: list[Filter] = Field(default_factory=list)


class DescribeZoneInstanceConfigInfos(Params):
    filters: list[Filter] = Field(default_factory=list, max_length=10)


class InstanceIds(Params):
    instance_ids: list[str] = Field(min_length=1, max_length=100)


class DescribeInstancesStatus(Paging):
    instance_ids: list[str] = Field(default_factory=list, max_length=100)


class DescribeInstancesAttributes(InstanceIds):
    attributes: list[str] = Field(min_length=1)


class ModifyInstancesAttribute(InstanceIds):
    instance_name: str | None = None  # at most 60 characters (InvalidInstanceName.TooLong)
    security_groups: list[str] | None = None
    disable_api_termination: bool | None = None
    host_name: str | None = None


class StopInstances(InstanceIds):
    stop_type: str | None = None  # SOFT (default), HARD, SOFT_FIRST
    force_stop: bool | None = None  # disused; not together with StopType
    stopped_mode: str | None = None  # KEEP_CHARGING (default), STOP_CHARGING


class DescribeImages(Paging):
    image_ids: list[str] = Field(default_factory=list)
    filters: list[Filter] = Field(default_factory=list)


class TagKeyValue(Params):
    tag_key: str
    tag_value: str = ""


class TagKey(Params):
    tag_key: str


class DescribeResourceTagsByResourceIds(Paging):
    service_type: str
    resource_prefix: str
    resource_ids: list[str] = Field(min_length=1)
    resource_region: str = ""


class ModifyResourceTags(Params):
    resource: str
    replace_tags: list[TagKeyValue] = Field(default_factory=list)
    delete_tags: list[TagKey] = Field(default_factory=list)


class DescribeDisks(Paging):
    disk_ids: list[str] = Field(default_factory=list)
    filters: list[Filter] = Field(default_factory=list)


class DescribeUsedIpAddress(Paging):
    vpc_id: str
    subnet_id: str | None = None
    ip_addresses: list[str] = Field(default_factory=list)


P = TypeVar("P", bound=Params)
_OUT_OF_RANGE = {
    "greater_than",
    "greater_than_equal",
    "less_than",
    "less_than_equal",
    "too_short",
    "too_long",
    "string_too_short",
    "string_too_long",
}


def parse(model: type[P], body: dict[str, Any]) -> P:
    """Validate a request body, turning pydantic's complaints into the API's error codes."""
    try:
        return model.model_validate(body)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        if first["type"] == "missing":
            raise ApiError(
                "MissingParameter", f"The request is missing a required parameter `{where}`."
            ) from None
        code = "InvalidParameterValue" if first["type"] in _OUT_OF_RANGE else "InvalidParameter"
        raise ApiError(code, f"The parameter `{where}` is invalid: {first['msg']}.") from None
