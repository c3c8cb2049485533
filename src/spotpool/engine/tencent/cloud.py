"""Direct Tencent Cloud API calls the engine and the operator make beside Pulumi: finding a
pool's (or the whole fleet's) instances by tag and terminating the ones no slot wants.

Clients are kept per (key pair, region, endpoint) so their HTTP connections are reused, and
every call first takes a token from the (SecretId, region, action) bucket (ratelimit.py).
"""

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, Field
from tencentcloud.common import credential
from tencentcloud.common.common_client import CommonClient
from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException
from tencentcloud.common.profile.client_profile import ClientProfile
from tencentcloud.common.profile.http_profile import HttpProfile
from tencentcloud.cvm.v20170312 import cvm_client, models

from spotpool.api.stackconfig import TAG_CLUSTER, TAG_INSTALL, TAG_POOL, TAG_POOL_UID, TAG_SLOT
from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.ratelimit import BUCKETS
from spotpool.engine.tencent.recent_writes import RECENT

T = TypeVar("T")
log = logging.getLogger(__name__)
# Set on the instances a deletion with deletionPolicy Retain keeps: their pool is gone on
# purpose, so the sweep of instances whose pool no longer exists leaves them running.
TAG_RETAINED = "spotpool-retained"
_clients: dict[tuple[str, str, str, str | None], cvm_client.CvmClient] = {}
_clients_lock = threading.Lock()
ON_CALL: list[Callable[[str, str], None]] = []  # (action, outcome) observers, e.g. metrics


def cvm(credentials: Credentials, region: str, endpoint: str | None) -> cvm_client.CvmClient:
    """A CVM client for the real cloud, or for `spotpool emulator serve` at `endpoint`; the
    same one again for the same key pair, region and endpoint (its connections are kept).
    Renewing credentials give their live keys: a new client once they were renewed."""
    credentials = credentials.current()
    secret_id = credentials.secret_id.get_secret_value()
    digest = hashlib.sha256(credentials.secret_key.get_secret_value().encode()).hexdigest()
    key = (secret_id, digest, region, endpoint)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = _new_client(credentials, region, endpoint)
        return client


def limited(
    client: cvm_client.CvmClient,
    action: str,
    request: Any,
    check: Callable[[], None] | None = None,
) -> Any:
    """`client.<action>(request)` after taking a token from its bucket; `check` (a writer's
    fence) is passed during the wait and right before the request is sent. A read the cloud
    throttled, failed or did not answer is asked again a few times (a fraction of a second
    apart, a token each); a write never is here (its caller knows whether it may be)."""
    tries = READ_TRIES if action.startswith(_READS) else 1
    pause = 0.2
    for attempt in range(1, tries + 1):
        try:
            return _call(client, action, request, check)
        except TencentCloudSDKException as error:
            if attempt == tries or not str(error.code or "").startswith(PASSING):
                raise
        time.sleep(pause)
        pause *= 2
    raise AssertionError("unreachable")  # pragma: no cover


READ_TRIES = 4
_READS = ("Describe", "Inquiry", "Get")
# A throttled, failed or unanswered read says nothing: asked again.
PASSING = ("RequestLimitExceeded", "InternalError", "ClientNetworkError", "ServerNetworkError")


def _call(
    client: cvm_client.CvmClient, action: str, request: Any, check: Callable[[], None] | None
) -> Any:
    owner = getattr(client, "bucket_owner", None) or client.credential.secretId
    BUCKETS.bucket(owner, client.region, action).take(check)
    outcome = "error"
    try:
        reply = getattr(client, action)(request)
        outcome = "ok"
        return reply
    except Exception as error:
        if "RequestLimitExceeded" in str(getattr(error, "code", "") or ""):
            outcome = "throttled"
        raise
    finally:
        for observe in ON_CALL:
            observe(action, outcome)


def _new_client(
    credentials: Credentials, region: str, endpoint: str | None
) -> cvm_client.CvmClient:
    profile = ClientProfile()
    if endpoint:
        scheme, _, host = endpoint.partition("://")
        profile = ClientProfile(httpProfile=HttpProfile(endpoint=host, protocol=scheme))
    cred = credential.Credential(
        credentials.secret_id.get_secret_value(),
        credentials.secret_key.get_secret_value(),
        credentials.token.get_secret_value() if credentials.token else None,
    )
    client = cvm_client.CvmClient(cred, region, profile)
    client.bucket_owner = credentials.bucket_owner()  # the account's bucket, across renewals
    return client


class TaggedInstance(BaseModel):
    instance_id: str
    slot: int | None = Field(description="None when the slot tag is missing or unreadable")
    state: str
    instance_type: str
    zone: str
    install: str | None = Field(None, description="The install that made it (its tag).")
    cluster: str | None = Field(None, description="The cluster whose operator made it (its tag).")
    created: datetime | None = None
    retained: bool = Field(False, description="Kept by a Retain deletion (its tag).")


class FleetInstance(TaggedInstance):
    pool_uid: str
    pool: str | None = Field(None, description="namespace/name of its pool (its tag).")


def pool_instances(client: cvm_client.CvmClient, pool_uid: str) -> list[TaggedInstance]:
    """Every instance the cloud still lists with this pool's uid tag."""
    return list(_tagged(client, {"Name": f"tag:{TAG_POOL_UID}", "Values": [pool_uid]}))


def fleet_instances(client: cvm_client.CvmClient) -> list[FleetInstance]:
    """Every instance of every pool on this key pair and region: one call per 100."""
    return list(_tagged(client, {"Name": "tag-key", "Values": [TAG_POOL_UID]}))


# Live states, at most five (a filter takes five values): a fleet's count over them drops when
# an instance is reclaimed, shut down or gone. REBOOTING and the rescue states are left out, so
# an instance in one of them only costs a needless full sweep, never a missed reclaim.
COUNTED_STATES = ["PENDING", "RUNNING", "STARTING", "STOPPING", "STOPPED"]


def count_fleet(client: cvm_client.CvmClient) -> int:
    """How many instances of all pools on this key pair and region are in a live state: one
    call whatever the fleet's size (Limit 1, only TotalCount is read)."""
    request = models.DescribeInstancesRequest()
    request.from_json_string(
        json.dumps(
            {
                "Filters": [
                    {"Name": "tag-key", "Values": [TAG_POOL_UID]},
                    {"Name": "instance-state", "Values": COUNTED_STATES},
                ],
                "Limit": 1,
            }
        )
    )
    return int(limited(client, "DescribeInstances", request).TotalCount)


def _tagged(client: cvm_client.CvmClient, tag_filter: dict[str, Any]) -> list[FleetInstance]:
    found: list[FleetInstance] = []
    offset = 0
    while True:
        request = models.DescribeInstancesRequest()
        request.from_json_string(
            json.dumps({"Filters": [tag_filter], "Offset": offset, "Limit": 100})
        )
        reply = limited(client, "DescribeInstances", request)
        RECENT.listed(item.InstanceId for item in reply.InstanceSet)
        found += [
            FleetInstance(
                instance_id=item.InstanceId,
                slot=_slot_of(item),
                state=item.InstanceState,
                instance_type=item.InstanceType,
                zone=item.Placement.Zone,
                pool_uid=_tag(item, TAG_POOL_UID) or "",
                pool=_tag(item, TAG_POOL),
                install=_tag(item, TAG_INSTALL),
                cluster=_tag(item, TAG_CLUSTER),
                created=_created(item),
                retained=_tag(item, TAG_RETAINED) is not None,
            )
            for item in reply.InstanceSet
            if not _stale(item)
        ]
        offset += len(reply.InstanceSet)
        if not reply.InstanceSet or offset >= reply.TotalCount:
            return found


def _stale(instance: Any) -> bool:
    """A lagging listing still shows an instance this process terminated a moment ago."""
    return instance.InstanceState not in _GONE and RECENT.terminated_recently(instance.InstanceId)


_GONE = frozenset({"TERMINATING", "SHUTDOWN", "LAUNCH_FAILED"})


def _created(instance: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(instance.CreatedTime).replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None


def _tag(instance: Any, key: str) -> str | None:
    for tag in instance.Tags or []:
        if tag.Key == key:
            return str(tag.Value)
    return None


def _slot_of(instance: Any) -> int | None:
    value = _tag(instance, TAG_SLOT)
    return int(value) if value is not None and value.isdigit() else None


def terminate(
    client: cvm_client.CvmClient,
    instance_ids: list[str],
    check: Callable[[], None] | None = None,
) -> None:
    """Terminate the instances; `check` (the writer's fence) is passed right before each
    request is sent, as for every other write: a writer that lost its right sends nothing."""
    for start in range(0, len(instance_ids), 100):  # the API takes at most 100 ids a call
        request = models.TerminateInstancesRequest()
        request.InstanceIds = instance_ids[start : start + 100]
        try:
            limited(client, "TerminateInstances", request, check)
        except TencentCloudSDKException as error:
            if str(error.code or "") not in ("ClientNetworkError", "ServerNetworkError"):
                raise
            # The answer was lost, not the call: never sent again blindly; the next sweep
            # (past the read-your-writes bound) sees whether it took effect.
            log.warning(
                "TerminateInstances of %d instance(s): no answer (%s)",
                len(request.InstanceIds),
                error.code,
            )
        RECENT.terminated(request.InstanceIds)


def mark_retained(client: cvm_client.CvmClient, instance_ids: list[str], when: str) -> None:
    """Tag each instance `spotpool-retained=<when>` (tag API ModifyResourceTags): a pool
    deleted with Retain keeps them, and no sweep may take them for a deleted pool's."""
    tags = CommonClient("tag", "2018-08-13", client.credential, client.region, client.profile)
    for instance_id in instance_ids:
        BUCKETS.bucket(client.credential.secretId, client.region, "ModifyResourceTags").take()
        resource = f"qcs::cvm:{client.region}:uin/:instance/{instance_id}"
        tags.call_json(
            "ModifyResourceTags",
            {"Resource": resource, "ReplaceTags": [{"TagKey": TAG_RETAINED, "TagValue": when}]},
        )
