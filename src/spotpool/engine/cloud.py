"""Direct Tencent Cloud API calls the engine needs beside Pulumi: finding a pool's instances by
tag (orphans, recovery) and terminating the ones no slot wants."""

import json
from typing import Any

from pydantic import BaseModel, Field
from tencentcloud.common import credential
from tencentcloud.common.profile.client_profile import ClientProfile
from tencentcloud.common.profile.http_profile import HttpProfile
from tencentcloud.cvm.v20170312 import cvm_client, models

from spotpool.api.stackconfig import TAG_POOL_UID, TAG_SLOT
from spotpool.engine.credentials import Credentials


def cvm(credentials: Credentials, region: str, endpoint: str | None) -> cvm_client.CvmClient:
    """A CVM client for the real cloud, or for `spotpool emulator serve` at `endpoint`."""
    profile = ClientProfile()
    if endpoint:
        scheme, _, host = endpoint.partition("://")
        profile = ClientProfile(httpProfile=HttpProfile(endpoint=host, protocol=scheme))
    cred = credential.Credential(
        credentials.secret_id.get_secret_value(), credentials.secret_key.get_secret_value()
    )
    return cvm_client.CvmClient(cred, region, profile)


class TaggedInstance(BaseModel):
    instance_id: str
    slot: int | None = Field(description="None when the slot tag is missing or unreadable")
    state: str
    instance_type: str
    zone: str


def pool_instances(client: cvm_client.CvmClient, pool_uid: str) -> list[TaggedInstance]:
    """Every instance the cloud still lists with this pool's uid tag."""
    found: list[TaggedInstance] = []
    offset = 0
    while True:
        request = models.DescribeInstancesRequest()
        request.from_json_string(
            json.dumps(
                {
                    "Filters": [{"Name": f"tag:{TAG_POOL_UID}", "Values": [pool_uid]}],
                    "Offset": offset,
                    "Limit": 100,
                }
            )
        )
        reply = client.DescribeInstances(request)
        found += [
            TaggedInstance(
                instance_id=item.InstanceId,
                slot=_slot_of(item),
                state=item.InstanceState,
                instance_type=item.InstanceType,
                zone=item.Placement.Zone,
            )
            for item in reply.InstanceSet
        ]
        offset += len(reply.InstanceSet)
        if not reply.InstanceSet or offset >= reply.TotalCount:
            return found


def _slot_of(instance: Any) -> int | None:
    for tag in instance.Tags or []:
        if tag.Key == TAG_SLOT and tag.Value.isdigit():
            return int(tag.Value)
    return None


def terminate(client: cvm_client.CvmClient, instance_ids: list[str]) -> None:
    for start in range(0, len(instance_ids), 100):  # the API takes at most 100 ids a call
        request = models.TerminateInstancesRequest()
        request.InstanceIds = instance_ids[start : start + 100]
        client.TerminateInstances(request)
