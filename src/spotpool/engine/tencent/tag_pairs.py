"""Tag key/value pairs of their own in an account (tag API 2018-08-13: CreateTag, DeleteTag,
DescribeTagValues), through the official SDK's CommonClient, each call after a token from its
(account, region, action) bucket. The tag service is the account's, not a region's: the region
only signs the call."""

import time
from collections.abc import Callable
from typing import Any

from tencentcloud.common.common_client import CommonClient
from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException

from spotpool.engine.tencent import cloud
from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.ratelimit import BUCKETS

PAGE = 1000  # DescribeTagValues' largest page; a key holds at most 1,000 values


class TagPairs:
    """The calls, for one cloud endpoint (None: Tencent Cloud)."""

    def __init__(self, endpoint: str | None) -> None:
        self.endpoint = endpoint

    def create(self, credentials: Credentials, region: str, key: str, value: str) -> None:
        """The pair exists afterwards (one already there is no error: a lost answer's repeat)."""
        try:
            self._call(credentials, region, "CreateTag", {"TagKey": key, "TagValue": value})
        except TencentCloudSDKException as error:
            if str(error.code or "") != "ResourceInUse.TagDuplicate":
                raise

    def delete(self, credentials: Credentials, region: str, key: str, value: str) -> None:
        """The pair is gone afterwards (one already gone is no error)."""
        try:
            self._call(credentials, region, "DeleteTag", {"TagKey": key, "TagValue": value})
        except TencentCloudSDKException as error:
            if str(error.code or "") != "ResourceNotFound.TagNonExist":
                raise

    def values(self, credentials: Credentials, region: str, key: str) -> list[str]:
        """Every value of `key` in the account, every page."""
        found: list[str] = []
        offset = 0
        while True:
            reply = self._call(credentials, region, "DescribeTagValues",
                               {"TagKeys": [key], "Offset": offset, "Limit": PAGE})  # fmt: skip
            tags = reply.get("Tags") or []
            found += [str(t["TagValue"]) for t in tags if t.get("TagKey") == key]
            offset += PAGE
            if len(tags) < PAGE or offset >= int(reply.get("TotalCount") or 0):
                return found

    def _call(
        self, credentials: Credentials, region: str, action: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        """Asked again a few times when throttled, failed or unanswered: every call here may
        be repeated (a create or delete already done is no error)."""
        pause = 0.2
        for attempt in range(1, cloud.READ_TRIES + 1):
            try:
                return self._once(credentials, region, action, params)
            except TencentCloudSDKException as error:
                passing = str(error.code or "").startswith(cloud.PASSING)
                if attempt == cloud.READ_TRIES or not passing:
                    raise
            time.sleep(pause)
            pause *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _once(
        self, credentials: Credentials, region: str, action: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        client = _client(credentials, region, self.endpoint)
        BUCKETS.bucket(credentials.bucket_owner(), region, action).take()
        outcome = "error"
        try:
            reply: dict[str, Any] = client.call_json(action, params)["Response"]
            outcome = "ok"
            return reply
        finally:
            _observe(action, outcome)


def _client(credentials: Credentials, region: str, endpoint: str | None) -> CommonClient:
    """The tag service's client on the CVM client's signing keys and profile (its endpoint)."""
    base = cloud.cvm(credentials, region, endpoint)
    return CommonClient("tag", "2018-08-13", base.credential, region, base.profile)


def _observe(action: str, outcome: str) -> None:
    observers: list[Callable[[str, str], None]] = cloud.ON_CALL
    for observe in observers:
        observe(action, outcome)
