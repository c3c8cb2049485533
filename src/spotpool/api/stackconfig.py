"""A Spotpool spec rendered as the configuration of its Pulumi stack.

Credentials are not part of it: they reach the provider only as environment variables of a
Pulumi run. A login password, when a pool uses one, goes into the stack as a secret.
"""

import hashlib
import json
from collections.abc import Collection, Mapping
from typing import TypeVar

from pydantic import Field

from spotpool.api.notices import NoticeAgent
from spotpool.api.spec import (
    ChargeType,
    DataDisk,
    InternetAccessible,
    Model,
    SpotpoolSpec,
    SystemDisk,
)

T = TypeVar("T")
PROJECT = "spotpool"
CONFIG_KEY = f"{PROJECT}:pool"
# Tags on every instance: which pool (and which slot) it belongs to, so an instance that
# never made it into the state can always be found again.
TAG_POOL_UID = "spotpool-pool-uid"
TAG_POOL = "spotpool-pool"
TAG_SLOT = "spotpool-slot"
USER_DATA_FINGERPRINT = "sha256:"  # a redacted user data: its hash, never its text
TAG_INSTALL = "spotpool-install"  # the install that made it; set by the program from config
# The cluster whose operator made it (its kube-system Namespace uid, or the install's explicit
# cluster id): with the install, what proves an instance is this operator's to sweep.
TAG_CLUSTER = "spotpool-cluster"
# Marks the install tag's value this release writes. The release before the cluster tag swept
# on the install tag alone (an exact match), and every default install writes the same id:
# marked, an instance of this release is never one such a sweep matches (a rollback, or a
# cluster on one account still on it). The unmarked value is read only with this cluster's tag.
INSTALL_MARK = "/v2"


def install_tag(install_id: str) -> str:
    """The `spotpool-install` value this release tags on every instance it makes."""
    return f"{install_id}{INSTALL_MARK}"


class PoolIdentity(Model):
    namespace: str
    name: str
    uid: str

    @property
    def stack_name(self) -> str:
        """`<namespace>.<name>`: a namespace has no dots, so it splits back unambiguously."""
        return f"{self.namespace}.{self.name}"


def split_stack_name(stack: str) -> tuple[str, str]:
    namespace, _, name = stack.partition(".")
    if not namespace or not name:
        raise ValueError(f"not a Spotpool stack name: {stack!r} (want <namespace>.<name>)")
    return namespace, name


class StackConfig(Model):
    pool: PoolIdentity
    count: int = Field(ge=0)
    region: str
    zones: list[str] = Field(min_length=1)
    instance_types: list[str] = Field(min_length=1)
    image_id: str
    vpc_id: str
    subnet_id: str
    security_group_ids: list[str] = Field(default_factory=list)
    charge_type: ChargeType
    spot_max_price: str | None = None
    system_disk: SystemDisk
    internet_accessible: InternetAccessible
    key_ids: list[str] = Field(default_factory=list)
    user_data: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    slot_types: dict[int, str] = Field(
        default_factory=dict,
        description="slots that fell back to a later instance type when the cloud had no stock",
    )
    adopted: dict[int, str] = Field(
        default_factory=dict,
        description="slots whose instance was adopted from the cloud (slot -> instance id) "
        "after a run died between creating it and recording it",
    )
    notice_agent: NoticeAgent | None = Field(
        None, description="the termination-notice agent every instance installs (None: none)"
    )
    slot_zones: dict[int, str] = Field(
        default_factory=dict,
        description="slots placed by stock in a zone of their own (else zone i mod len(zones))",
    )
    slot_charges: dict[int, ChargeType] = Field(
        default_factory=dict,
        description="slots with a charge type of their own: on-demand fallbacks of a spot pool",
    )
    subnet_ids: dict[str, str] = Field(
        default_factory=dict, description="zone -> subnet (else subnet_id)"
    )
    image_ids: dict[str, str] = Field(
        default_factory=dict, description="instance type -> image (else image_id)"
    )
    data_disks: list[DataDisk] = Field(default_factory=list)
    cam_role_name: str | None = None
    placement_group_id: str | None = None

    @classmethod
    def from_spec(
        cls, pool: PoolIdentity, spec: SpotpoolSpec, notice_url: str | None = None
    ) -> "StackConfig":
        """`notice_url`: the operator's notice endpoint; without one no agent is installed."""
        notices = spec.termination_notices
        agent = (
            NoticeAgent(
                url=notice_url,
                command=notices.command,
                on_notice=notices.on_notice,
                on_notice_timeout=notices.on_notice_timeout_seconds,
            )
            if notice_url and notices.enabled
            else None
        )
        return cls(
            pool=pool,
            count=spec.desired_count(),
            region=spec.region,
            zones=spec.zones(),
            instance_types=spec.types(),
            image_id=spec.image_id,
            vpc_id=spec.vpc_id,
            subnet_id=spec.subnet_id,
            security_group_ids=list(spec.security_group_ids or []),
            charge_type=spec.instance_charge_type,
            spot_max_price=spec.spot_max_price,
            system_disk=spec.system_disk,
            internet_accessible=spec.internet_accessible,
            key_ids=list((spec.login_settings and spec.login_settings.key_ids) or []),
            user_data=spec.user_data,
            tags=dict(spec.tags or {}),
            notice_agent=agent,
            subnet_ids=dict(spec.subnet_ids or {}),
            image_ids=dict(spec.image_ids or {}),
            data_disks=list(spec.data_disks or []),
            cam_role_name=spec.cam_role_name,
            placement_group_id=spec.placement_group_id,
        )

    def type_of(self, slot: int) -> str:
        """The first instance type, unless this slot fell back to a later one."""
        return self.slot_types.get(slot, self.instance_types[0])

    def falling_back(self, slots: list[int]) -> "StackConfig | None":
        """This config with each of `slots` moved to its next instance type; None when one of
        them has no type left to try."""
        moved = dict(self.slot_types)
        for slot in slots:
            position = self.instance_types.index(self.type_of(slot)) + 1
            if position >= len(self.instance_types):
                return None
            moved[slot] = self.instance_types[position]
        return self.model_copy(update={"slot_types": moved})

    def keeping_fallbacks(self, previous: "StackConfig", live_slots: set[int]) -> "StackConfig":
        """Carry over where the slots that still have an instance are (type, zone, charge:
        changing one would replace them), unless this config places such a slot itself; a
        slot created afresh goes where this config says (by default the first type)."""

        def kept(mine: dict[int, T], theirs: dict[int, T], allowed: Collection[T]) -> dict[int, T]:
            carried = {
                slot: value
                for slot, value in theirs.items()
                if slot in live_slots and slot < self.count and value in allowed
            }
            return {**carried, **mine}

        return self.model_copy(
            update={
                "slot_types": kept(self.slot_types, previous.slot_types, self.instance_types),
                "slot_zones": kept(self.slot_zones, previous.slot_zones, self.zones),
                "slot_charges": kept(self.slot_charges, previous.slot_charges, list(ChargeType)),
            }
        )

    def placing(self, where: Mapping[int, tuple[str, str, ChargeType]]) -> "StackConfig":
        """This config with each slot -> (zone, instance type, charge type) placed there."""
        types, zones, charges = (
            dict(self.slot_types),
            dict(self.slot_zones),
            dict(self.slot_charges),
        )
        for slot, (zone, kind, charge) in where.items():
            types[slot], zones[slot], charges[slot] = kind, zone, charge
        return self.model_copy(
            update={"slot_types": types, "slot_zones": zones, "slot_charges": charges}
        )

    def intent(self) -> "StackConfig":
        """The config without where each slot landed (types, zones, charges, adoptions): what
        the spec asks, to compare with what was applied."""
        return self.model_copy(
            update={"slot_types": {}, "slot_zones": {}, "slot_charges": {}, "adopted": {}}
        )

    def charge_of(self, slot: int) -> ChargeType:
        """The pool's charge type, unless this slot fell back to on-demand."""
        return self.slot_charges.get(slot, self.charge_type)

    def on_demand_slots(self) -> list[int]:
        """Slots of a spot pool created on-demand (POSTPAID_BY_HOUR) for want of spot stock."""
        return sorted(
            slot
            for slot in range(self.count)
            if self.charge_of(slot) is not self.charge_type
            and self.charge_type is ChargeType.SPOTPAID
        )

    def keeping_adopted(self, previous: "StackConfig", live: dict[int, str]) -> "StackConfig":
        """Carry over the adoptions whose instance still holds its slot."""
        kept = {
            slot: instance_id
            for slot, instance_id in previous.adopted.items()
            if live.get(slot) == instance_id and slot < self.count
        }
        return self.model_copy(update={"adopted": kept})

    def adopting(self, orphans: dict[int, tuple[str, str]]) -> "StackConfig":
        """This config with each slot -> (instance id, instance type) adopted as it is."""
        adopted, types = dict(self.adopted), dict(self.slot_types)
        for slot, (instance_id, kind) in orphans.items():
            adopted[slot] = instance_id
            if kind != self.instance_types[0]:
                types[slot] = kind
        return self.model_copy(update={"adopted": adopted, "slot_types": types})

    def zone_of(self, slot: int) -> str:
        """The zone stock placement chose for the slot; else slot i lives in zone i mod
        len(zones) (the zones in order)."""
        return self.slot_zones.get(slot) or self.zones[slot % len(self.zones)]

    def subnet_of(self, slot: int) -> str:
        """The subnet of the slot's zone (a subnet lives in one zone), else subnet_id."""
        return self.subnet_ids.get(self.zone_of(slot), self.subnet_id)

    def image_of(self, slot: int) -> str:
        """The image of the slot's instance type, else image_id."""
        return self.image_ids.get(self.type_of(slot), self.image_id)

    def instance_name(self, slot: int) -> str:
        """The name the slot's instance carries in the console."""
        return f"{self.pool.namespace}-{self.pool.name}-{slot}"

    def instance_tags(self, slot: int) -> dict[str, str]:
        return {
            **self.tags,
            TAG_POOL_UID: self.pool.uid,
            TAG_POOL: f"{self.pool.namespace}/{self.pool.name}",
            TAG_SLOT: str(slot),
        }

    def redacted(self) -> "StackConfig":
        """The config with its user data (often holding tokens) replaced by a fingerprint: what
        plain stack config, state exports and status may show. The user data itself travels
        as a secret config value (`spotpool:userData`), encrypted in the state."""
        if self.user_data is None or self.user_data.startswith(USER_DATA_FINGERPRINT):
            return self
        digest = hashlib.sha256(self.user_data.encode()).hexdigest()
        return self.model_copy(update={"user_data": f"{USER_DATA_FINGERPRINT}{digest}"})

    def to_pulumi_config(self) -> dict[str, str]:
        """Plain (non-secret) stack configuration values, keyed as Pulumi keys them."""
        plain = self.redacted()
        return {
            CONFIG_KEY: json.dumps(plain.model_dump(mode="json", by_alias=True), sort_keys=True),
            "tencentcloud:region": self.region,
        }
