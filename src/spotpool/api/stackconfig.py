"""A Spotpool spec rendered as the configuration of its Pulumi stack.

Credentials are not part of it: they reach the provider only as environment variables of a
Pulumi run. A login password, when a pool uses one, goes into the stack as a secret.
"""

import hashlib
import json

from pydantic import Field

from spotpool.api.spec import (
    ChargeType,
    InternetAccessible,
    Model,
    SpotpoolSpec,
    SystemDisk,
)

PROJECT = "spotpool"
CONFIG_KEY = f"{PROJECT}:pool"
# Tags on every instance: which pool (and which slot) it belongs to, so an instance that
# never made it into the state can always be found again.
TAG_POOL_UID = "spotpool-pool-uid"
TAG_POOL = "spotpool-pool"
TAG_SLOT = "spotpool-slot"
USER_DATA_FINGERPRINT = "sha256:"  # a redacted user data: its hash, never its text
TAG_INSTALL = "spotpool-install"  # the install that made it; set by the program from config


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

    @classmethod
    def from_spec(cls, pool: PoolIdentity, spec: SpotpoolSpec) -> "StackConfig":
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
        """Carry over the fallbacks of slots that still have an instance (changing their type
        would replace them); a slot created afresh tries the first type again."""
        kept = {
            slot: kind
            for slot, kind in previous.slot_types.items()
            if slot in live_slots and slot < self.count and kind in self.instance_types
        }
        return self.model_copy(update={"slot_types": kept})

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
        """Slots are spread over the zones in order: slot i lives in zone i mod len(zones)."""
        return self.zones[slot % len(self.zones)]

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
