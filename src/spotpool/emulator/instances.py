"""One emulated CVM instance and its life: states advance lazily, by the clock, when read."""

import time
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from spotpool.emulator.catalog import INSTANCE_TYPES, InstanceType, image_os_name
from spotpool.emulator.iam import DEFAULT_ACCOUNT

GONE = "GONE"  # not a cloud state: the instance has left DescribeInstances
LAUNCH_FAILED = "LAUNCH_FAILED"  # a launch that never booted (misbehaviour.py makes some)
LAUNCH_FAILED_MESSAGE = (
    "ResourceInsufficient.SpecifiedInstanceType: the instance could not be launched because the "
    "zone ran short of the instance type while it was being created. Terminate it and retry."
)


class Disk(BaseModel):
    disk_id: str
    disk_type: str
    disk_size: int
    delete_with_instance: bool = True


class InstanceRecord(BaseModel):
    """Everything the emulator keeps of an instance; `to_api` renders the API's view."""

    instance_id: str
    uuid: str
    region: str
    zone: str
    project_id: int = 0
    instance_type: str
    charge_type: str
    spot_max_price: str | None = None
    image_id: str
    name: str
    host_name: str = ""
    security_group_ids: list[str] = Field(default_factory=list)
    vpc_id: str
    subnet_id: str
    private_ip: str
    public_ip: str | None = None
    internet_charge_type: str = "TRAFFIC_POSTPAID_BY_HOUR"
    bandwidth_out: int = 0
    system_disk: Disk
    data_disks: list[Disk] = Field(default_factory=list)
    key_ids: list[str] = Field(default_factory=list)
    user_data: str = ""
    tags: dict[str, str] = Field(default_factory=dict)
    disk_tags: dict[str, dict[str, str]] = Field(default_factory=dict)
    disable_api_termination: bool = False
    cam_role_name: str = ""
    account: str = DEFAULT_ACCOUNT  # the account (uin) it was launched in
    disaster_recover_group_id: str = ""  # a placement group (ps-...)
    created: float

    state: str = "PENDING"
    latest_operation: str = "RunInstances"
    latest_operation_state: str = "OPERATING"
    latest_operation_request_id: str = ""
    latest_operation_error_msg: str = ""
    next_state: str | None = "RUNNING"
    transition_until: float | None = None
    reclaim_at: float | None = None  # spot reclaim notice ends: then the cloud terminates it
    termination_time: float | None = None
    gone_reason: str | None = None  # "terminated" or "reclaimed"
    gone_at: float | None = None

    @property
    def spot(self) -> bool:
        return self.charge_type == "SPOTPAID"

    @property
    def gone(self) -> bool:
        return self.state == GONE

    @property
    def busy(self) -> bool:
        return self.latest_operation_state == "OPERATING"

    def begin(
        self,
        operation: str,
        state: str,
        next_state: str,
        until: float,
        request_id: str,
    ) -> None:
        """Start an operation: `state` now, `next_state` once the clock passes `until`."""
        self.latest_operation = operation
        self.latest_operation_state = "OPERATING"
        self.latest_operation_request_id = request_id
        self.latest_operation_error_msg = ""
        self.state = state
        self.next_state = next_state
        self.transition_until = until

    def advance(self, now: float, transition_seconds: float) -> bool:
        """Apply every transition that is due by `now`; True when something changed."""
        changed = False
        while True:
            if self.transition_until is not None and now >= self.transition_until:
                finished_at = self.transition_until
                assert self.next_state is not None
                self.state = self.next_state
                self.next_state = None
                self.transition_until = None
                self.latest_operation_state = "SUCCESS"
                if self.state == LAUNCH_FAILED:
                    self.latest_operation_state = "FAILED"
                    self.latest_operation_error_msg = LAUNCH_FAILED_MESSAGE
                if self.state == GONE:
                    self.gone_at = finished_at
                changed = True
            elif self.reclaim_at is not None and now >= self.reclaim_at and not self.gone:
                start = self.reclaim_at
                self.reclaim_at = None
                self.gone_reason = "reclaimed"
                self.begin(
                    "TerminateInstances", "TERMINATING", GONE, start + transition_seconds, ""
                )
                changed = True
            else:
                return changed

    def to_api(self) -> dict[str, Any]:
        """The instance as DescribeInstances shows it (fields the provider reads are never null)."""
        kind: InstanceType = INSTANCE_TYPES.get(self.instance_type, InstanceType(2, 4))
        booted = self.state not in ("PENDING", LAUNCH_FAILED)
        view: dict[str, Any] = {
            "Placement": {"Zone": self.zone, "ProjectId": self.project_id, "HostIds": None},
            "InstanceId": self.instance_id,
            "Uuid": self.uuid,
            "InstanceType": self.instance_type,
            "CPU": kind.cpu,
            "Memory": kind.memory_gb,
            "RestrictState": "NORMAL",
            "InstanceName": self.name,
            "HostName": self.host_name or self.instance_id,
            "InstanceChargeType": self.charge_type,
            "SystemDisk": {
                "DiskType": self.system_disk.disk_type,
                "DiskId": self.system_disk.disk_id,
                "DiskSize": self.system_disk.disk_size,
            },
            "DataDisks": [
                {
                    "DiskType": d.disk_type,
                    "DiskId": d.disk_id,
                    "DiskSize": d.disk_size,
                    "DeleteWithInstance": d.delete_with_instance,
                    "Encrypt": False,
                }
                for d in self.data_disks
            ]
            or None,
            "PrivateIpAddresses": [self.private_ip] if booted else None,
            "PublicIpAddresses": [self.public_ip] if booted and self.public_ip else None,
            "InternetAccessible": {
                "InternetChargeType": self.internet_charge_type,
                "InternetMaxBandwidthOut": self.bandwidth_out,
                "PublicIpAssigned": self.public_ip is not None,
            },
            "VirtualPrivateCloud": {
                "VpcId": self.vpc_id,
                "SubnetId": self.subnet_id,
                "AsVpcGateway": False,
            },
            "ImageId": self.image_id,
            "OsName": image_os_name(self.image_id),
            "RenewFlag": None,
            "CreatedTime": iso(self.created),
            "ExpiredTime": None,
            "SecurityGroupIds": list(self.security_group_ids),
            "LoginSettings": {"KeyIds": list(self.key_ids)},
            "InstanceState": self.state,
            "Tags": [{"Key": k, "Value": v} for k, v in self.tags.items()],
            "StopChargingMode": "NOT_APPLICABLE",
            "LatestOperation": self.latest_operation,
            "LatestOperationState": self.latest_operation_state,
            "LatestOperationRequestId": self.latest_operation_request_id,
            "LatestOperationErrorMsg": self.latest_operation_error_msg,
            "DisasterRecoverGroupId": self.disaster_recover_group_id,
            "IPv6Addresses": None,
            "CamRoleName": self.cam_role_name,
            "HpcClusterId": "",
            "RdmaIpAddresses": None,
            "IsolatedSource": "NOTISOLATED",
            "LicenseType": "TencentCloud",
            "DisableApiTermination": self.disable_api_termination,
            "DefaultLoginUser": "root",
            "DefaultLoginPort": 22,
        }
        if kind.gpu_count:
            view["GPUInfo"] = {"GPUCount": kind.gpu_count, "GPUId": [], "GPUType": kind.gpu_type}
        return view

    def to_admin(self) -> dict[str, Any]:
        """The emulator's own view: the API view plus what only the emulator knows."""
        view = self.to_api()
        view.update(
            Region=self.region,
            Zone=self.zone,
            Account=self.account,
            Gone=self.gone,
            GoneReason=self.gone_reason,
            GoneTime=iso(self.gone_at) if self.gone_at else None,
            # The same two moments unrounded (the API's times are to the second): a check of
            # overlapping lifetimes needs what happened inside one second.
            CreatedAt=self.created,
            GoneAt=self.gone_at,
            SpotTerminationTime=iso(self.termination_time) if self.termination_time else None,
        )
        return view


def iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now() -> float:
    return time.time()
