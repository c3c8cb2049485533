"""Tag key/value pairs of their own (CreateTag, DeleteTag, DescribeTagValues, DescribeTags), as the
real tag service answers them, through the official SDK's CommonClient; kept on disk."""

import pytest
from pydantic import SecretStr
from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException

from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.tag_pairs import TagPairs
from tests.emulator.conftest import StartEmulator
from tests.emulator.harness import REGION, EmulatorProcess, run_spot

pytestmark = pytest.mark.integration
KEY = "spotpool-claim-0b1c2d3e-aaaa-bbbb-cccc-111122223333"
A, B = "1;1700000000;host-a_1a2b3c4d", "1;1700000030;host-b_5e6f7a8b"


def _values(emulator: EmulatorProcess, key: str, limit: int = 1000, offset: int = 0) -> list[str]:
    tag = emulator.common("tag", "2018-08-13")
    reply = tag.call_json("DescribeTagValues", {"TagKeys": [key], "Limit": limit,
                                                "Offset": offset})["Response"]  # fmt: skip
    return [t["TagValue"] for t in reply["Tags"]]


def _code(call: object) -> str:
    with pytest.raises(TencentCloudSDKException) as caught:
        call()  # type: ignore[operator]
    return str(caught.value.code)


def test_pairs_made_listed_and_deleted_survive_a_restart(start: StartEmulator) -> None:
    first = start()
    tag = first.common("tag", "2018-08-13")
    for value in (A, B):
        tag.call_json("CreateTag", {"TagKey": KEY, "TagValue": value})
    duplicate = _code(lambda: tag.call_json("CreateTag", {"TagKey": KEY, "TagValue": A}))
    assert duplicate == "ResourceInUse.TagDuplicate"
    assert _values(first, KEY) == [A, B]
    assert _values(first, KEY, limit=1, offset=1) == [B]
    assert _code(lambda: _values(first, KEY, limit=2, offset=1)) == (
        "InvalidParameterValue.OffsetInvalid"
    )
    first.stop()

    second = start(state=first.state)
    assert len(_values(second, KEY)) == 2  # on disk
    tag = second.common("tag", "2018-08-13")
    tag.call_json("DeleteTag", {"TagKey": KEY, "TagValue": A})
    assert _values(second, KEY) == [B]
    gone = _code(lambda: tag.call_json("DeleteTag", {"TagKey": KEY, "TagValue": A}))
    assert gone == "ResourceNotFound.TagNonExist"
    listed = tag.call_json("DescribeTags", {"TagKey": KEY})["Response"]
    assert [(t["TagKey"], t["TagValue"]) for t in listed["Tags"]] == [(KEY, B)]


def test_the_real_limits_on_keys_and_values(emulator: EmulatorProcess) -> None:
    tag = emulator.common("tag", "2018-08-13")

    def create(key: str, value: str) -> str:
        return _code(lambda: tag.call_json("CreateTag", {"TagKey": key, "TagValue": value}))

    assert create("k" * 128, "v") == "InvalidParameterValue.TagKeyLengthExceeded"
    assert create("k", "v" * 256) == "InvalidParameterValue.TagValueLengthExceeded"
    assert create("k|x", "v") == "InvalidParameterValue.TagKeyCharacterIllegal"
    assert create("k", "v#1") == "InvalidParameterValue.TagValueCharacterIllegal"
    assert create("k", " v") == "InvalidParameterValue.TagValueCharacterIllegal"
    assert create("qcs:owner", "v") == "InvalidParameterValue.ReservedTagKey"
    assert create("k", "") == "InvalidParameterValue.TagValueEmpty"
    tag.call_json("CreateTag", {"TagKey": "k" * 127, "TagValue": "+-=._:/@()[],;><" + "v" * 239})
    assert len(_values(emulator, "k" * 127)) == 1


def test_values_bound_to_instances_are_listed_and_cannot_be_deleted(
    emulator: EmulatorProcess,
) -> None:
    (instance_id,) = run_spot(emulator.cvm(), count=1, tags={"team": "ml"})
    tag = emulator.common("tag", "2018-08-13")
    assert _values(emulator, "team") == ["ml"]
    code = _code(lambda: tag.call_json("DeleteTag", {"TagKey": "team", "TagValue": "ml"}))
    assert code == "FailedOperation.TagAttachedResource", instance_id


def test_the_engines_tag_pairs_client_makes_lists_and_deletes(emulator: EmulatorProcess) -> None:
    """engine/tencent/tag_pairs.py as the operator's cloud claims call it: a repeat of a create
    or a delete (an answer lost) is no error; every page is read."""
    keys = Credentials(secret_id=SecretStr(emulator.secret_id),
                       secret_key=SecretStr(emulator.secret_key))  # fmt: skip
    pairs = TagPairs(emulator.endpoint)
    for value in (A, B, A):
        pairs.create(keys, REGION, KEY, value)
    assert pairs.values(keys, REGION, KEY) == [A, B]
    pairs.delete(keys, REGION, KEY, A)
    pairs.delete(keys, REGION, KEY, A)
    assert pairs.values(keys, REGION, KEY) == [B]
    assert pairs.values(keys, REGION, "spotpool-claim-nobody") == []
