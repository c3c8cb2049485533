"""Tag key/value pairs of their own (tag API 2018-08-13): CreateTag, DeleteTag, DescribeTagValues,
DescribeTags. A pair exists in the account without a resource; the tags on instances are listed
beside them, as the real service lists every value the account uses.

The real limits (product doc 651/13354, the SDK's error codes): a key of 1-127 characters, a
value of 1-255; letters, digits, spaces inside, and `+ - = . _ : / @ ( ) [ ] , ; > <` (and
the full-width `【 】`); keys starting with `qcloud`, `tencent`, `project` or `qcs:` are the
cloud's; 1,000 keys an account, 1,000 values a key; a pair bound to a resource cannot be
deleted. Pages: `Offset` a multiple of `Limit` (at most 1,000).
"""

import re
from typing import Any

from pydantic import Field

from spotpool.emulator import params
from spotpool.emulator.errors import ApiError, missing
from spotpool.emulator.world import Context

MAX_KEYS = 1000
MAX_VALUES = 1000
_ALLOWED = re.compile(r"^[\w +\-=.:/@()\[\],;><【】]+$")
_RESERVED = ("qcloud", "tencent", "project", "qcs:")


class _Pair(params.Params):
    tag_key: str
    tag_value: str


class _Values(params.Params):
    tag_keys: list[str] = Field(default_factory=list)
    offset: int = Field(0, ge=0)
    limit: int = Field(15, ge=1, le=1000)


class _Tags(params.Params):
    tag_key: str | None = None
    tag_value: str | None = None
    tag_keys: list[str] = Field(default_factory=list)
    offset: int = Field(0, ge=0)
    limit: int = Field(15, ge=1, le=1000)


def _check(key: str, value: str) -> None:
    if not key:
        raise ApiError("InvalidParameterValue.TagKeyEmpty", "The tag key is empty.")
    if len(key) > 127:
        raise ApiError("InvalidParameterValue.TagKeyLengthExceeded",
                       "A tag key has at most 127 characters.")  # fmt: skip
    if key.lower().startswith(_RESERVED):
        raise ApiError("InvalidParameterValue.ReservedTagKey",
                       f"The tag key `{key}` is reserved for the cloud.")  # fmt: skip
    if not _ALLOWED.match(key) or key != key.strip():
        raise ApiError("InvalidParameterValue.TagKeyCharacterIllegal",
                       f"The tag key `{key}` has a character that is not allowed.")  # fmt: skip
    if not value:
        raise ApiError("InvalidParameterValue.TagValueEmpty", "The tag value is empty.")
    if len(value) > 255:
        raise ApiError("InvalidParameterValue.TagValueLengthExceeded",
                       "A tag value has at most 255 characters.")  # fmt: skip
    if not _ALLOWED.match(value) or value != value.strip():
        raise ApiError("InvalidParameterValue.TagValueCharacterIllegal",
                       f"The tag value `{value}` has a character that is not allowed.")  # fmt: skip


def _bound(ctx: Context) -> set[tuple[str, str]]:
    """The pairs on the account's instances and their disks."""
    found: set[tuple[str, str]] = set()
    for record in ctx.world.store.instances.values():
        if record.account == ctx.account and not record.gone:
            found |= set(record.tags.items())
            for tags in record.disk_tags.values():
                found |= set(tags.items())
    return found


def _pairs(ctx: Context) -> set[tuple[str, str]]:
    own = {(k, v) for account, k, v in ctx.world.store.tag_pairs if account == ctx.account}
    return own | _bound(ctx)


def _pair(body: dict[str, Any]) -> tuple[str, str]:
    p = params.parse(_Pair, body)
    return p.tag_key, p.tag_value


def create_tag(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    key, value = _pair(body)
    _check(key, value)
    pairs = _pairs(ctx)
    if (key, value) in pairs:
        raise ApiError("ResourceInUse.TagDuplicate", f"The tag {key}:{value} already exists.")
    keys = {k for k, _ in pairs}
    if key not in keys and len(keys) >= MAX_KEYS:
        raise ApiError("LimitExceeded.TagKey", f"The account has {MAX_KEYS} tag keys already.")
    if sum(1 for k, _ in pairs if k == key) >= MAX_VALUES:
        raise ApiError("LimitExceeded.TagValue", f"The key `{key}` has {MAX_VALUES} values.")
    ctx.world.store.add_tag_pair(ctx.account, key, value)
    return {}


def delete_tag(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    key, value = _pair(body)
    if (key, value) in _bound(ctx):
        raise ApiError("FailedOperation.TagAttachedResource",
                       f"The tag {key}:{value} is bound to a resource.")  # fmt: skip
    if (ctx.account, key, value) not in ctx.world.store.tag_pairs:
        raise ApiError("ResourceNotFound.TagNonExist", f"The tag {key}:{value} does not exist.")
    ctx.world.store.remove_tag_pair(ctx.account, key, value)
    return {}


def _page(rows: list[dict[str, Any]], offset: int, limit: int) -> dict[str, Any]:
    if offset % limit:
        raise ApiError("InvalidParameterValue.OffsetInvalid",
                       "Offset must be a multiple of Limit.")  # fmt: skip
    return {"TotalCount": len(rows), "Offset": offset, "Limit": limit,
            "Tags": rows[offset : offset + limit]}  # fmt: skip


def describe_tag_values(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    p = params.parse(_Values, body)
    if not p.tag_keys:
        raise missing("TagKeys")
    rows = [{"TagKey": k, "TagValue": v} for k, v in sorted(_pairs(ctx)) if k in p.tag_keys]
    return _page(rows, p.offset, p.limit)


def describe_tags(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    p = params.parse(_Tags, body)
    rows = [
        {"TagKey": k, "TagValue": v, "CanDelete": 1, "Category": "Custom"}
        for k, v in sorted(_pairs(ctx))
        if (p.tag_key is None or k == p.tag_key)
        and (p.tag_value is None or v == p.tag_value)
        and (not p.tag_keys or k in p.tag_keys)
    ]
    return _page(rows, p.offset, p.limit)


ACTIONS = {
    "CreateTag": create_tag,
    "DeleteTag": delete_tag,
    "DescribeTagValues": describe_tag_values,
    "DescribeTags": describe_tags,
}
