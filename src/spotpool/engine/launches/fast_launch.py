"""The storm fast path: replace reclaimed slots through the cloud API at once, with exactly the
RunInstances request the tencentcloud provider would send for each slot's
`tencentcloud.instance.Instance` (stacks/spotpool/spot_pool.py), and leave the rest to Pulumi.

Pulumi stays the source of truth: the instances launched here are recorded as a launch intent
beside the stack (launch_intents.py) before any call is sent, and the stack's next `up`
adopts each into its slot (an import: no create, no replacement; `preview` then shows no
change). Each slot's launch carries an idempotent ClientToken of (pool uid, slot,
generation): a retry, or a restart that launches the same intent again, gets the same instance
back and creates nothing.

The request, field by field, is what `resourceTencentCloudInstanceCreate` of
terraform-provider-tencentcloud v1.81.20 (resource_tc_instance.go) builds from the program's
inputs: `GetOk` fields only when non-zero, `GetOkExists` ones (`allocate_public_ip`,
`disable_*_service`, `disable_api_termination`) always, `keep_image_login` as "FALSE",
`spot_instance_type` lower-cased, `user_data_raw` base64-encoded, `placement_group_id` as
`DisasterRecoverGroupIds`, each data disk with its schema defaults, the tags as one
`TagSpecification` of the instance. It sets no InstanceCount: every slot differs (name,
hostname, slot tag, generation), so there is nothing identical to batch; one call per slot.
"""

import base64
import hashlib
import json
import secrets
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException
from tencentcloud.cvm.v20170312 import models

from spotpool.api import notices
from spotpool.api.notices import NONCE_TAG
from spotpool.api.spec import ChargeType
from spotpool.api.stackconfig import (
    TAG_CLUSTER,
    TAG_INSTALL,
    USER_DATA_FINGERPRINT,
    StackConfig,
    install_tag,
)
from spotpool.engine.basics.errors import EngineError
from spotpool.engine.basics.stack_view import StackView
from spotpool.engine.launches import launch_intents
from spotpool.engine.launches.launch_intents import SlotLaunch
from spotpool.engine.leftovers import recovery
from spotpool.engine.runs.known_stacks import stack_lock
from spotpool.engine.tencent import cloud, cloud_errors
from spotpool.engine.tencent.recent_writes import RECENT

__all__ = ["FastLaunch", "launch_replacements", "run_instances_request"]
# Answers after which the same request (same ClientToken) may simply be sent again.
RETRYABLE = ("RequestLimitExceeded", "InternalError", "ClientNetworkError", "ServerNetworkError")
# Answers after which the request may have reached the cloud (and created the instance).
MAYBE_SENT = ("InternalError", "ClientNetworkError", "ServerNetworkError")
RETRY_FOR = 30.0  # seconds one slot's launch keeps retrying those


@dataclass
class FastLaunch:
    """What `launch_replacements` did: slot -> instance id launched (or launched before, under
    the same intent), and slot -> the cloud's error code for the slots it could not launch
    (nothing was created for them; `no_stock` names those the cloud had no capacity for)."""

    instances: dict[int, str] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)

    @property
    def no_stock(self) -> list[int]:
        return sorted(s for s, code in self.failed.items() if cloud_errors.is_no_stock(code))


def client_token(pool_uid: str, slot: int, generation: str) -> str:
    """RunInstances' ClientToken for one slot's launch of one generation (≤ 64 ASCII)."""
    digest = hashlib.sha256(f"{pool_uid}/{slot}/{generation}".encode()).hexdigest()
    return f"spotpool-{digest[:48]}"


def run_instances_request(
    config: StackConfig,
    slot: int,
    install: str | None,
    password: str | None,
    user_data: str | None,
    notice_key: str | None,
    nonce: str,
    cluster: str | None = None,
) -> dict[str, Any]:
    """The RunInstances parameters the provider sends for `slot`'s instance, as the stack
    program declares it with these inputs (the same names as SpotPool takes them)."""
    c = config
    charge = c.charge_of(slot)
    net = c.internet_accessible
    agent = c.notice_agent if notice_key is not None else None
    nonce = nonce if agent is not None else ""
    body: dict[str, Any] = {
        "ImageId": c.image_of(slot),
        "Placement": {"Zone": c.zone_of(slot)},
        "InstanceName": f"{c.pool.namespace}-{c.pool.name}-{slot}",
        "InstanceType": c.type_of(slot),
        "HostName": f"{c.pool.name}-{slot}"[:60],
        "InstanceChargeType": charge.value,
        "InternetAccessible": {
            "InternetChargeType": net.charge_type.value,
            **({"InternetMaxBandwidthOut": net.max_bandwidth_out} if net.max_bandwidth_out else {}),
            "PublicIpAssigned": net.public_ip_assigned,
        },
        "SystemDisk": {"DiskType": c.system_disk.type.value, "DiskSize": c.system_disk.size},
        "EnhancedService": {
            "SecurityService": {"Enabled": True},
            "MonitorService": {"Enabled": True},
        },
        "LoginSettings": {
            **({"KeyIds": list(c.key_ids)} if c.key_ids else {}),
            **({"Password": password} if password else {}),
            "KeepImageLogin": "FALSE",
        },
        "DisableApiTermination": False,
    }
    if c.cam_role_name:
        body["CamRoleName"] = c.cam_role_name
    if c.placement_group_id:
        body["DisasterRecoverGroupIds"] = [c.placement_group_id]
    if c.data_disks:  # the provider sends its schema's defaults too (throughput, encrypt)
        body["DataDisks"] = [
            {"DiskType": d.type.value, "DiskSize": d.size, "ThroughputPerformance": 0,
             "DeleteWithInstance": d.delete_with_instance, "Encrypt": False}
            for d in c.data_disks
        ]  # fmt: skip
    if charge is ChargeType.SPOTPAID:
        spot: dict[str, str] = {"SpotInstanceType": "one-time"}
        if c.spot_max_price:
            spot["MaxPrice"] = c.spot_max_price
        body["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
    if c.vpc_id != "DEFAULT":  # DEFAULT: the program leaves vpc and subnet to the provider
        vpc = {"VpcId": c.vpc_id}
        if c.subnet_of(slot) != "DEFAULT":  # the subnet of the slot's zone
            vpc["SubnetId"] = c.subnet_of(slot)
        body["VirtualPrivateCloud"] = vpc
    if c.security_group_ids:
        body["SecurityGroupIds"] = list(c.security_group_ids)
    raw = user_data
    if agent is not None and notice_key is not None:
        token = notices.slot_token(notice_key, slot, nonce)
        raw = notices.with_agent(
            user_data, notices.agent_part(agent, c.pool.uid, slot, token, nonce)
        )
    if raw:
        body["UserData"] = base64.b64encode(raw.encode()).decode()
    tags = {
        **c.instance_tags(slot),
        **({TAG_INSTALL: install_tag(install)} if install else {}),
        **({TAG_CLUSTER: cluster} if cluster else {}),
        **({NONCE_TAG: nonce} if nonce else {}),
    }
    body["TagSpecification"] = [
        {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
    ]
    return body


def launch_replacements(
    pool: StackView,
    config: StackConfig,
    slots: Iterable[int],
    login_password: str | None = None,
) -> FastLaunch:
    """Launch each of `slots`' next instance now, through the cloud API, as the stack program
    would make it from `config` (placed as the caller wants each slot: type, zone, charge),
    and record the launch intent the stack's next `up` adopts from. A slot with an intent
    already (launched before, not adopted yet) is launched again with the same ClientToken:
    the cloud answers with the same instance. Takes the stack's in-process lock and the
    shared (SecretId, region, RunInstances) token bucket; refuses when this writer does not
    hold the pool's Lease or another owner holds the stack's Pulumi lock. The writer's fence
    (its Lease, and the calling operation's shard fence, `processes.fenced`) is passed after
    every wait — the stack lock, the bucket, each pause between tries — right before each
    write and each send: a writer that stalled while the pool moved on sends nothing more.

    Then run `pool.up(config, ..., refresh=True)` (any `up` adopts; `replace_slots` defers
    to one): it drops the reclaimed instances, adopts the launched ones into their slots and
    settles the intent. A slot with a surge instance needs none of this: its surge instance
    takes the slot (`replace_slots`); an intent for such a slot is dropped by the up."""
    wanted = sorted({s for s in slots if 0 <= s < config.count})
    if not wanted:
        return FastLaunch()
    if config.user_data and config.user_data.startswith(USER_DATA_FINGERPRINT):
        raise EngineError(f"stack {pool.name}: the fast path needs the user data, not its hash")
    fence = recovery.pool_fence(pool)
    with stack_lock(pool.name):
        fence()
        recovery.break_stale_locks(pool)  # a live owner's lock raises StackLockedError
        intent = launch_intents.read_intent(pool)
        for slot in wanted:
            if slot not in intent.slots:
                generation = secrets.token_hex(8)  # as notice_nonces draws them
                new = SlotLaunch(
                    client_token=client_token(pool.pool.uid, slot, generation),
                    generation=generation,
                    nonce=generation if config.notice_agent is not None else "",
                    zone=config.zone_of(slot),
                    instance_type=config.type_of(slot),
                    charge_type=config.charge_of(slot),
                    launched=time.time(),
                )
                fence()
                launch_intents.add_launch(pool, slot, new)  # durable before it is sent
                intent.slots[slot] = new
        # Each slot exactly as it was first launched: a retry must send the same request.
        placed = config.placing(
            {s: (intent.slots[s].zone, intent.slots[s].instance_type, intent.slots[s].charge_type)
             for s in wanted}
        )  # fmt: skip
        key = pool.settings.notice_key(pool.pool.uid) if config.notice_agent else None
        client = cloud.cvm(pool.credentials, pool.region, pool.settings.cloud_endpoint)

        def send(slot: int) -> tuple[int, Sent]:
            body = run_instances_request(
                placed, slot, pool.settings.install_id, login_password, config.user_data, key,
                intent.slots[slot].nonce, pool.settings.cluster_id,
            )  # fmt: skip
            body["ClientToken"] = intent.slots[slot].client_token
            try:
                return slot, _send(client, body, fence)
            except Exception as error:  # the fence: this slot is not sent (again)
                return slot, Sent(refused=error)

        with ThreadPoolExecutor(max_workers=min(8, len(wanted))) as workers:
            outcomes = list(workers.map(send, wanted))
        # What the cloud answered is written only while the writer still holds the pool: a
        # launch whose record stays without an instance id is adopted by its tags.
        for _, sent in outcomes:
            if sent.refused is not None:
                raise sent.refused
        fence()
        done = FastLaunch()
        for slot, sent in outcomes:
            made = intent.slots[slot]
            if sent.instance_id is not None:
                made.instance_id = done.instances[slot] = sent.instance_id
                launch_intents.record_instance(pool, slot, made)
            elif sent.code is not None:
                done.failed[slot] = sent.code
                if not sent.maybe_made:  # the cloud said no, and no earlier try may have made it
                    launch_intents.drop_launch(pool, slot, made)
        return done


@dataclass
class Sent:
    """One slot's RunInstances: the instance, or the cloud's last error code and whether an
    earlier try may still have made an instance; `refused`: the fence stopped it."""

    instance_id: str | None = None
    code: str | None = None
    maybe_made: bool = False
    refused: Exception | None = None


def _send(client: Any, body: dict[str, Any], fence: Callable[[], None]) -> Sent:
    """Send the launch, retrying what may simply be sent again; the fence is passed after
    every wait (the account's bucket, each pause between tries), right before each send."""
    request = models.RunInstancesRequest()
    request.from_json_string(json.dumps(body))
    deadline = time.monotonic() + RETRY_FOR
    pause = 0.1
    unsure = False  # an earlier try's request may have reached the cloud and made the instance
    while True:
        try:
            reply = cloud.limited(client, "RunInstances", request, check=fence)
            RECENT.launched(str(i) for i in reply.InstanceIdSet)  # a lagging listing: not gone
            return Sent(instance_id=str(reply.InstanceIdSet[0]))
        except TencentCloudSDKException as error:
            code = str(error.code or "ClientNetworkError")
            if code not in RETRYABLE or time.monotonic() + pause > deadline:
                made = unsure or code in RETRYABLE or _names_the_token(code)
                return Sent(code=code, maybe_made=made)
            unsure = unsure or code in MAYBE_SENT
        time.sleep(pause)
        pause = min(1.0, pause * 2)


def _names_the_token(code: str) -> bool:
    """An answer about the ClientToken itself (already used, with other parameters): a
    request under that token was made before, and may have created the instance."""
    return any(word in code for word in ("ClientToken", "Idempotent"))
