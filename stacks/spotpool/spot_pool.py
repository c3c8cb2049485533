"""The SpotPool component: one `tencentcloud.Instance` per slot of the pool.

Each slot has a stable logical name (`<pool>-slot-<i>`), so when the cloud reclaims one spot
instance, refresh drops exactly that slot and the next `up` recreates it alone. Scaling down
removes the highest slots first; scaling up adds new slots after the last. An instance that a
killed run created but never recorded is adopted into its slot (imported), not recreated.
"""

from typing import Any

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

from spotpool.api import notices
from spotpool.api.notices import NONCE_TAG, PREVIOUS_TAG, SURGE_SUFFIX
from spotpool.api.spec import ChargeType
from spotpool.api.stackconfig import TAG_CLUSTER, TAG_INSTALL, StackConfig, install_tag

# What the cloud never reports back about an instance. An adopted instance keeps what it was
# created with: setting these again would reset its password or, for hostname, reinstall it.
NOT_READ_BACK = [
    "hostname", "password", "keyIds", "userDataRaw", "spotInstanceType", "spotMaxPrice",
    "placementGroupId",
]  # fmt: skip
SECRET_INPUTS = ["password", "userDataRaw"]  # inputs the stack holds as secrets


class SpotPool(pulumi.ComponentResource):
    instances: list[tencentcloud.instance.Instance]

    def __init__(
        self,
        name: str,
        config: StackConfig,
        login_password: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
        install: str | None = None,
        user_data: pulumi.Input[str] | None = None,
        notice_key: pulumi.Input[str] | None = None,
        notice_nonces: dict[str, str] | None = None,
        surge: list[int] | None = None,
        promote: list[int] | None = None,
        keep_secret_inputs: list[str] | None = None,
        cluster: str | None = None,
    ) -> None:
        super().__init__("spotpool:index:SpotPool", name, None, opts)
        self._name = name
        self._config = config
        self._password = login_password
        self._install = install  # tagged on every instance: only its install sweeps orphans
        # Tagged beside the install: the cluster whose operator made it. An instance made
        # before the tag existed gets it in place at its stack's next up (tags update in place).
        self._cluster = cluster
        self._user_data = user_data  # a secret: never plain in state, exports or diffs
        self._notice_key = notice_key  # a secret: the pool's key for its slots' notice tokens
        # Each instance's generation ("3", "3-surge" -> nonce), drawn by the engine at its create.
        self._nonces = notice_nonces or {}
        # Surge slots: a second instance made on a termination notice, beside the slot's own.
        # Promoted slots: the surge instance becomes the slot's (an alias: a rename in state).
        self._promote = set(promote or [])
        # A preview of the redacted copy (preview/redact.py): the state's placeholders stand
        # for secret inputs whose fingerprint did not change, so they must not show as changes.
        self._kept = [name for name in SECRET_INPUTS if name in (keep_secret_inputs or [])]
        self.instances = [self._slot(slot) for slot in range(config.count)]
        self.surges = {slot: self._slot(slot, surge=True) for slot in sorted(set(surge or []))}
        self.outputs = pulumi.Output.all(
            *[self._describe(slot, inst) for slot, inst in enumerate(self.instances)]
        )
        self.surge_outputs = pulumi.Output.all(
            *[self._describe(slot, inst) for slot, inst in self.surges.items()]
        )
        self.register_outputs({"instances": self.outputs, "surges": self.surge_outputs})

    def _slot(self, slot: int, surge: bool = False) -> tencentcloud.instance.Instance:
        c = self._config
        charge = c.charge_of(slot)  # a spot pool's slot may have fallen back to on-demand
        spot = charge == ChargeType.SPOTPAID
        # Adoption names the slot's own instance: a surge beside it is always a new one (else
        # a notice on a slot filled by adoption "surged" by importing the noticed instance).
        adopted = None if surge else c.adopted.get(slot)
        net = c.internet_accessible
        nonce = self._nonce_of(slot, surge)
        previous = self._previous_of(slot, surge)
        return tencentcloud.instance.Instance(
            f"{self._name}-slot-{slot}{SURGE_SUFFIX if surge else ''}",
            instance_name=c.instance_name(slot),
            hostname=f"{c.pool.name}-{slot}"[:60],
            availability_zone=c.zone_of(slot),
            instance_type=c.type_of(slot),
            image_id=c.image_of(slot),  # an image per instance type, else the pool's
            instance_charge_type=charge.value,
            spot_instance_type="ONE-TIME" if spot else None,
            spot_max_price=c.spot_max_price if spot else None,
            # DEFAULT means the region's default VPC and subnet: the provider's own default.
            vpc_id=None if c.vpc_id == "DEFAULT" else c.vpc_id,
            subnet_id=None if c.subnet_of(slot) == "DEFAULT" else c.subnet_of(slot),  # zonal
            orderly_security_groups=c.security_group_ids or None,
            system_disk_type=c.system_disk.type.value,
            system_disk_size=c.system_disk.size,
            data_disks=[
                tencentcloud.instance.InstanceDataDiskArgs(
                    data_disk_type=d.type.value,
                    data_disk_size=d.size,
                    delete_with_instance=d.delete_with_instance,
                )
                for d in c.data_disks
            ]
            or None,
            cam_role_name=c.cam_role_name,
            placement_group_id=c.placement_group_id,
            internet_charge_type=net.charge_type.value,
            internet_max_bandwidth_out=net.max_bandwidth_out,
            allocate_public_ip=net.public_ip_assigned,
            key_ids=c.key_ids or None,
            password=self._password,
            user_data_raw=self._user_data_of(slot, nonce, previous),
            tags={
                **self._tags(slot),
                **({NONCE_TAG: nonce} if nonce else {}),
                **({PREVIOUS_TAG: previous} if previous else {}),
            },
            opts=pulumi.ResourceOptions(
                parent=self,
                aliases=[pulumi.Alias(name=f"{self._name}-slot-{slot}{SURGE_SUFFIX}")]
                if slot in self._promote and not surge
                else None,
                # A spot instance cannot be resized, moved or rebilled in place: a new type,
                # zone or charge type means a new instance (made before the old one goes).
                replace_on_changes=["instanceType", "availabilityZone", "instanceChargeType"],
                import_=adopted,
                # An adopted instance keeps the generation a killed run made it with.
                ignore_changes=[*NOT_READ_BACK, f'tags["{NONCE_TAG}"]', *self._kept]
                if adopted
                else self._kept or None,
            ),
        )

    def _nonce_of(self, slot: int, surge: bool) -> str:
        """The instance's generation: a promoted slot's is its surge instance's (the engine
        plans it so); none when the pool installs no agent."""
        if self._config.notice_agent is None or self._notice_key is None:
            return ""
        return self._nonces.get(f"{slot}{SURGE_SUFFIX}" if surge else str(slot), "")

    def _previous_of(self, slot: int, surge: bool) -> str:
        """The instance a surge instance replaces, kept once it is promoted (the engine plans
        it with the nonces: `<key>@previous`); "" for any other instance."""
        if self._config.notice_agent is None or self._notice_key is None:
            return ""
        return self._nonces.get(f"{slot}{SURGE_SUFFIX if surge else ''}@previous", "")

    def _user_data_of(self, slot: int, nonce: str, previous: str = "") -> pulumi.Input[str] | None:
        """The pool's user data, with the notice agent's part and this instance's token (its
        slot's and generation's) when the pool installs the agent (a surge instance carries its
        slot's number: it may be promoted)."""
        agent = self._config.notice_agent
        if agent is None or self._notice_key is None:
            return self._user_data
        uid = self._config.pool.uid

        def render(values: list[Any]) -> str:
            token = notices.slot_token(values[1], slot, nonce)
            part = notices.agent_part(agent, uid, slot, token, nonce, previous)
            return notices.with_agent(values[0], part)

        return pulumi.Output.secret(
            pulumi.Output.all(self._user_data, self._notice_key).apply(render)
        )

    def _tags(self, slot: int) -> dict[str, str]:
        """The pool's and the slot's tags, the install's and the cluster's."""
        return {
            **self._config.instance_tags(slot),
            **({TAG_INSTALL: install_tag(self._install)} if self._install else {}),
            **({TAG_CLUSTER: self._cluster} if self._cluster else {}),
        }

    @staticmethod
    def _describe(slot: int, inst: tencentcloud.instance.Instance) -> pulumi.Output[Any]:
        return pulumi.Output.all(
            inst.id,
            inst.public_ip,
            inst.private_ip,
            inst.availability_zone,
            inst.instance_type,
            inst.instance_status,
            inst.instance_charge_type,
            inst.tags,
        ).apply(
            lambda v: {
                "slot": slot,
                "instanceId": v[0],
                "publicIp": v[1],
                "privateIp": v[2],
                "zone": v[3],
                "instanceType": v[4],
                "state": v[5],
                "chargeType": v[6],
                "nonce": (v[7] or {}).get(NONCE_TAG),
            }
        )
