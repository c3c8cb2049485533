"""The three credential forms in the spec, and the shared cache of temporary credentials
(renewal at two thirds of a life, one STS call per identity however many pools ask, a failed
renewal keeping keys that still have life)."""

import threading

import pytest
from pydantic import SecretStr

from spotpool.api.identity import AssumeRole, role_account
from spotpool.api.spec import SpotpoolSpec
from spotpool.engine.tencent import sts
from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.identities import CredentialCache
from tests._support.specs import article_spec, refusal

pytestmark = pytest.mark.unit

ROLE = "qcs::cam::uin/100000000002:roleName/spotpool-launcher"


def _spec(**changes: object) -> dict[str, object]:
    spec = article_spec(**changes)
    return {k: v for k, v in spec.items() if v is not None}


def test_a_role_on_a_secrets_keys_and_the_operators_identity_alone_are_valid() -> None:
    with_role = SpotpoolSpec.model_validate(
        _spec(
            credentialsSecretRef={"name": "keys"},
            secretId=None,
            secretKey=None,
            assumeRole={"roleArn": ROLE, "externalId": "team-b"},
        )
    )
    assert with_role.assume_role is not None
    assert with_role.assume_role.duration_seconds == 7200
    assert with_role.assume_role.session_name == "spotpool"
    assert with_role.credentials_secret_ref is not None
    assert with_role.credentials_secret_ref.token_key == "token"
    alone = SpotpoolSpec.model_validate(
        _spec(secretId=None, secretKey=None, useOperatorIdentity=True)
    )
    assert alone.use_operator_identity and alone.credentials_secret_ref is None
    chained = SpotpoolSpec.model_validate(
        _spec(secretId=None, secretKey=None, useOperatorIdentity=True, assumeRole={"roleArn": ROLE})
    )
    assert chained.assume_role is not None
    assert role_account(ROLE) == "100000000002"


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"useOperatorIdentity": True}, "useOperatorIdentity takes no keys"),
        ({"secretId": None, "secretKey": None}, "useOperatorIdentity: true"),
        ({"assumeRole": {"roleArn": "arn:aws:iam::1:role/x"}}, "roleArn"),
        ({"assumeRole": {"roleArn": ROLE, "durationSeconds": 60}}, "durationSeconds"),
        ({"assumeRole": {"roleArn": ROLE, "durationSeconds": 50000}}, "durationSeconds"),
        ({"assumeRole": {"roleArn": ROLE, "sessionName": "a b"}}, "sessionName"),
        ({"assumeRole": {"roleArn": ROLE, "role": "x"}}, "role"),
    ],
)
def test_credential_mistakes_are_refused_naming_what_to_fix(
    changes: dict[str, object], says: str
) -> None:
    assert says in refusal(**changes)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _keys(n: int, clock: _Clock, life: float) -> Credentials:
    return Credentials(
        secret_id=SecretStr(f"AKIDtmp{n}"),
        secret_key=SecretStr(f"key{n}"),
        token=SecretStr(f"token{n}"),
        expires=clock.now + life,
        account="100000000002",
        identity="role:x",
    )


def test_renewed_at_two_thirds_of_their_life_and_found_again_by_any_old_secret_id() -> None:
    clock, fetched = _Clock(), list[float]()

    def fetch() -> Credentials:
        fetched.append(clock.now)
        return _keys(len(fetched), clock, 60)

    cache = CredentialCache(clock)
    first = cache.get("role:x", fetch)
    assert first.secret_id.get_secret_value() == "AKIDtmp1" and first.temporary
    clock.now += 39
    assert cache.get("role:x", fetch).secret_id.get_secret_value() == "AKIDtmp1"
    clock.now += 2  # past 40 s of 60
    assert first.current().secret_id.get_secret_value() == "AKIDtmp2"
    assert first.provider_env()["TENCENTCLOUD_SECURITY_TOKEN"] == "token2"
    # A run that started with the first keys is re-signed with the live ones.
    renewed = cache.current_for("AKIDtmp1")
    assert renewed is not None and renewed.secret_id.get_secret_value() == "AKIDtmp2"
    assert cache.current_for("AKIDpermanent") is None
    assert first.bucket_owner() == "100000000002" and first.identity_key() == "role:x"
    assert fetched == [1000.0, 1041.0]


def test_one_sts_call_per_identity_however_many_ask_at_once() -> None:
    clock, calls = _Clock(), list[int]()
    started = threading.Event()

    def fetch() -> Credentials:
        calls.append(1)
        started.wait(1)
        return _keys(len(calls), clock, 3600)

    cache = CredentialCache(clock)
    threads = [threading.Thread(target=cache.get, args=("role:x", fetch)) for _ in range(8)]
    for thread in threads:
        thread.start()
    started.set()
    for thread in threads:
        thread.join()
    assert calls == [1]


def test_a_failed_renewal_keeps_keys_with_life_left_then_says_why() -> None:
    clock, refuse = _Clock(), list[bool]()

    def fetch() -> Credentials:
        if refuse:
            raise sts.StsError("UnauthorizedOperation", "not in the trust policy")
        return _keys(1, clock, 60)

    cache = CredentialCache(clock)
    held = cache.get("role:x", fetch)
    refuse.append(True)
    clock.now += 45  # renewal due, refused: 15 s left is too little to keep using them
    with pytest.raises(sts.StsError, match="trust policy"):
        held.current()
    clock.now -= 10  # 25 s left: still used while renewal is refused
    assert held.current().secret_id.get_secret_value() == "AKIDtmp1"


def test_permanent_keys_stay_as_they_are() -> None:
    keys = Credentials(secret_id=SecretStr("AKIDperm"), secret_key=SecretStr("k"))
    assert keys.current() is keys and not keys.temporary
    assert "TENCENTCLOUD_SECURITY_TOKEN" not in keys.provider_env()
    assert keys.bucket_owner() == "AKIDperm"
    role = AssumeRole(role_arn=ROLE)
    assert role.duration_seconds == 7200


def test_a_call_re_signed_with_the_live_keys_verifies_as_theirs() -> None:
    from spotpool.emulator.signature import SignedRequest, verify
    from spotpool.engine.tencent import tc3

    body = b'{"Limit": 100}'
    headers = {
        "Host": "cvm.tencentcloudapi.com",
        "Content-Type": "application/json",
        "X-TC-Action": "DescribeInstances",
        "X-TC-Token": "the-old-token",
        "Authorization": "TC3-HMAC-SHA256 Credential=AKIDold/2026-11-27/cvm/tc3_request, "
        "SignedHeaders=content-type;host;x-tc-action, Signature=" + "0" * 64,
    }
    live = Credentials(
        secret_id=SecretStr("AKIDlive"), secret_key=SecretStr("live-key"), token=SecretStr("t2")
    )
    replaced = tc3.resign("POST", "", headers, body, live, 1_800_000_000)
    assert replaced is not None and replaced["X-TC-Token"] == "t2"
    merged = {k.lower(): v for k, v in {**headers, **replaced}.items()}
    caller = verify(
        SignedRequest("POST", "/", "", merged, body), {"AKIDlive": "live-key"}, 1_800_000_000
    )
    assert caller.secret_id == "AKIDlive" and caller.service == "cvm"
    assert tc3.resign("POST", "", {"Authorization": "SKIP"}, body, live, 0) is None
