"""Fast checks of the emulator's parts without a server: signatures, parameters, lifecycles."""

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tencentcloud.common.sign import Sign

from spotpool.emulator import params
from spotpool.emulator.errors import ApiError
from spotpool.emulator.instances import GONE, Disk, InstanceRecord
from spotpool.emulator.signature import SignedRequest, scope_service, signature, verify
from spotpool.emulator.store import CloudStore
from spotpool.emulator.world import Settings, World

pytestmark = pytest.mark.unit

KEYS = {"AKIDtest": "secret"}
NOW = 1_800_000_000


def _signed(body: bytes, key: str = "secret", timestamp: int = NOW) -> SignedRequest:
    date = datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d")
    headers = {"content-type": "application/json", "host": "cvm.tencentcloudapi.com"}
    canonical = "\n".join(
        [
            "POST",
            "/",
            "",
            "content-type:application/json\nhost:cvm.tencentcloudapi.com\n",
            "content-type;host",
            hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{date}/cvm/tc3_request"
    to_sign = "\n".join(
        ["TC3-HMAC-SHA256", str(timestamp), scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    sig = Sign.sign_tc3(key, date, "cvm", to_sign)  # the official SDK's signer
    headers["authorization"] = (
        f"TC3-HMAC-SHA256 Credential=AKIDtest/{scope}, SignedHeaders=content-type;host, "
        f"Signature={sig}"
    )
    headers["x-tc-timestamp"] = str(timestamp)
    return SignedRequest("POST", "/", "", headers, body)


def test_our_signature_matches_the_official_sdk() -> None:
    assert signature("k", "2026-01-01", "cvm", "text") == Sign.sign_tc3(
        "k", "2026-01-01", "cvm", "text"
    )


def test_a_correct_signature_names_the_caller_and_service() -> None:
    caller = verify(_signed(b"{}"), KEYS, NOW + 10)
    assert (caller.secret_id, caller.service) == ("AKIDtest", "cvm")


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (_signed(b"{}", key="wrong"), "AuthFailure.SignatureFailure"),
        (_signed(b"{}", timestamp=NOW - 301), "AuthFailure.SignatureExpire"),
    ],
)
def test_bad_signatures_get_the_real_codes(request_: SignedRequest, code: str) -> None:
    with pytest.raises(ApiError) as raised:
        verify(request_, KEYS, NOW)
    assert raised.value.code == code


def test_a_tampered_body_fails_the_signature() -> None:
    original = _signed(b'{"InstanceCount": 1}')
    tampered = SignedRequest("POST", "/", "", original.headers, b'{"InstanceCount": 9}')
    with pytest.raises(ApiError, match="SignatureFailure"):
        verify(tampered, KEYS, NOW)


def test_an_unknown_secret_id_is_not_found() -> None:
    with pytest.raises(ApiError) as raised:
        verify(_signed(b"{}"), {"AKIDother": "secret"}, NOW)
    assert raised.value.code == "AuthFailure.SecretIdNotFound"


@pytest.mark.parametrize(
    ("authorization", "service"),
    [
        (str(_signed(b"{}").headers["authorization"]), "cvm"),
        (
            "TC3-HMAC-SHA256 Credential=AKIDx/2026-01-01/tag/tc3_request, "
            "SignedHeaders=host, Signature=not-hex",
            "tag",
        ),
        ("Basic dXNlcjpwYXNzd29yZA==", None),
        ("", None),
    ],
)
def test_the_scope_names_the_service_even_when_the_signature_is_bad(
    authorization: str, service: str | None
) -> None:
    """What the request log shows as `action=<service>.<Action>` for a refused request."""
    assert scope_service(authorization) == service


@pytest.mark.parametrize(
    ("body", "code", "where"),
    [
        ({"ImageId": "img-1"}, "MissingParameter", "Placement"),
        ({"Placement": {}, "ImageId": "img-1"}, "MissingParameter", "Placement.Zone"),
        (
            {"Placement": {"Zone": "z"}, "ImageId": "img-1", "InstanceCount": 0},
            "InvalidParameterValue",
            "InstanceCount",
        ),
        (
            {"Placement": {"Zone": "z"}, "ImageId": "img-1", "InstanceCount": "many"},
            "InvalidParameter",
            "InstanceCount",
        ),
    ],
)
def test_parameter_errors_name_the_parameter(
    body: dict[str, object], code: str, where: str
) -> None:
    with pytest.raises(ApiError) as raised:
        params.parse(params.RunInstances, body)
    assert raised.value.code == code
    assert f"`{where}`" in raised.value.message


def _record(created: float) -> InstanceRecord:
    return InstanceRecord(
        instance_id="ins-aaaaaaaa",
        uuid="u",
        region="ap-singapore",
        zone="ap-singapore-2",
        instance_type="GN7.2XLARGE32",
        charge_type="SPOTPAID",
        image_id="img-1",
        name="n",
        vpc_id="vpc-1",
        subnet_id="subnet-1",
        private_ip="172.16.0.2",
        system_disk=Disk(disk_id="disk-1", disk_type="CLOUD_PREMIUM", disk_size=50),
        created=created,
        transition_until=created + 5,
    )


def test_a_reclaimed_spot_instance_is_noticed_then_terminated_then_gone(tmp_path: Path) -> None:
    clock = [1000.0]
    world = World(
        CloudStore(tmp_path / "cloud.db"),
        Settings(boot_seconds=5, reclaim_notice_seconds=120),
        clock=lambda: clock[0],
    )
    record = _record(1000.0)
    world.touch(record)
    clock[0] = 1006
    assert [r.state for r in world.live("ap-singapore")] == ["RUNNING"]
    world.reclaim([record])
    clock[0] = 1006 + 119
    assert record.state == "RUNNING" and record.termination_time == 1006 + 120
    clock[0] = 1006 + 121
    assert [r.state for r in world.live("ap-singapore")] == ["TERMINATING"]
    clock[0] = 1006 + 126
    assert world.live("ap-singapore") == []
    assert (record.state, record.gone_reason) == (GONE, "reclaimed")
    reopened = CloudStore(tmp_path / "cloud.db")  # the reclaim survived in SQLite
    assert reopened.instances["ins-aaaaaaaa"].gone_reason == "reclaimed"
