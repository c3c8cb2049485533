"""Identity claims in the cloud account (engine/leftovers/claim_tags.py, the operator's
cloud/cloud_claims.py and cloud/claims.py): two operators with one cluster id and install on two
**different** state backends find each other through one account's tag pairs and hold; a value
nobody renews is deleted by whoever reads it, a clean stop deletes its own, an account whose
claims cannot be read is not swept. The tag service here is a fake with the real limits."""

import re
from pathlib import Path

import pytest
from pydantic import SecretStr
from spotpool_operator.cloud.claims import IdentityClaims
from spotpool_operator.cloud.cloud_claims import CloudClaims

from spotpool.engine.leftovers.claim_tags import (
    RENEW_EVERY,
    STALE_AFTER,
    claim_key,
    decode,
    encode,
    sort_values,
)
from spotpool.engine.leftovers.claims import Claim
from spotpool.engine.tencent.credentials import Credentials

pytestmark = pytest.mark.unit
KEYS = Credentials(secret_id=SecretStr("AKID-a"), secret_key=SecretStr("key-a"))
REGION = "ap-singapore"
CLUSTER = "0b1c2d3e-aaaa-bbbb-cccc-111122223333"
# The tag service's characters (product doc 651/13354), `;` among them
ALLOWED = re.compile(r"^[\w +\-=.:/@()\[\],;><]+$")


class FakeTags:
    """One account's tag pairs, checked as the real service checks them."""

    def __init__(self) -> None:
        self.pairs: set[tuple[str, str]] = set()
        self.calls: list[str] = []
        self.broken = False

    def create(self, credentials: Credentials, region: str, key: str, value: str) -> None:
        self._call("CreateTag")
        assert 1 <= len(key) <= 127 and 1 <= len(value) <= 255
        assert ALLOWED.match(key) and ALLOWED.match(value)
        self.pairs.add((key, value))

    def delete(self, credentials: Credentials, region: str, key: str, value: str) -> None:
        self._call("DeleteTag")
        self.pairs.discard((key, value))

    def values(self, credentials: Credentials, region: str, key: str) -> list[str]:
        self._call("DescribeTagValues")
        return sorted(v for k, v in self.pairs if k == key)

    def _call(self, action: str) -> None:
        if self.broken:
            raise RuntimeError("AuthFailure.UnauthorizedOperation")
        self.calls.append(action)


def _claims(tmp_path: Path, name: str, tags: FakeTags, now: list[float]) -> IdentityClaims:
    """An operator on a backend of its own (`name`), with A's cluster id and install."""
    claims = IdentityClaims(f"file://{tmp_path / name}", CLUSTER, "default.spotpool",
                            f"{name}-host_1a2b3c4d", kube_uid=f"uid-{name}",
                            holders=lambda: {f"{name}-host_1a2b3c4d": now[0]},
                            clock=lambda: now[0])  # fmt: skip
    claims.cloud = CloudClaims(lambda: [(KEYS, REGION)], tags, clock=lambda: now[0])
    return claims


def test_a_value_fits_the_tag_service_and_reads_back() -> None:
    claim = Claim(cluster=CLUSTER, install="default.spotpool", nonce="pod-7d9f_1a2b3c4d",
                  kube_uid="5e6f7a8b-0000-1111-2222-333344445555", started=1.0,
                  renewed=1700000000.5)  # fmt: skip
    value = encode(claim)
    assert value == ("1;1700000000;pod-7d9f_1a2b3c4d;default.spotpool;"
                     "5e6f7a8b-0000-1111-2222-333344445555")  # fmt: skip
    back = decode(CLUSTER, value)
    assert back is not None and (back.nonce, back.install, back.kube_uid, back.renewed) == (
        "pod-7d9f_1a2b3c4d", "default.spotpool", "5e6f7a8b-0000-1111-2222-333344445555",
        1700000000.0,
    )  # fmt: skip
    huge = claim.model_copy(update={"nonce": "n;" * 200, "install": "é" * 300, "kube_uid": None})
    assert len(encode(huge)) <= 255 and ALLOWED.match(encode(huge))
    assert ";h-" in encode(huge) and encode(huge).endswith(";-")
    assert len(claim_key("x" * 500)) <= 127 and claim_key(CLUSTER) == f"spotpool-claim-{CLUSTER}"
    assert decode(CLUSTER, "someone else's value") is None


def test_a_read_names_the_live_others_newest_first_our_old_values_and_stale_ones() -> None:
    def value(nonce: str, renewed: float) -> str:
        return encode(Claim(cluster=CLUSTER, install="i", nonce=nonce, started=0, renewed=renewed))

    now = 10_000.0
    values = [value("me", now - 31), value("me", now - 1), value("b", now - 40),
              value("b", now - 10), value("gone", now - STALE_AFTER - 1), "not ours"]  # fmt: skip
    read = sort_values(CLUSTER, values, "me", value("me", now - 1), now)
    assert [(c.nonce, c.renewed) for c in read.others] == [("b", now - 10)]
    assert read.own == [value("me", now - 31)]
    assert read.stale == [value("gone", now - STALE_AFTER - 1)]


def test_two_backends_one_identity_hold_each_other_through_the_account(tmp_path: Path) -> None:
    tags, now = FakeTags(), [1_000_000.0]
    a = _claims(tmp_path, "a", tags, now)
    assert a.check(sweeping=True) is None  # alone; its claim is in the account now
    b = _claims(tmp_path, "b", tags, now)
    problem = b.check(sweeping=True)
    assert problem and "a-host_1a2b3c4d" in problem and "uid-a" in problem
    assert "cloud account" in problem
    now[0] += 5
    assert a.check(sweeping=True) is not None and "uid-b" in str(a.conflict())
    # B stops without deleting its value (killed): it is a rival until it is stale, then gone.
    b.cloud = None
    now[0] += STALE_AFTER - 5
    assert a.check(sweeping=True) is not None
    now[0] += 10
    assert a.check(sweeping=True) is None
    assert [v for _, v in tags.pairs if "b-host" in v] == []  # deleted by the one who saw it


def test_without_the_cloud_claim_two_backends_never_see_each_other(tmp_path: Path) -> None:
    """The control: the backend's claims alone (what there was before)."""
    tags, now = FakeTags(), [1_000_000.0]
    a, b = _claims(tmp_path, "a", tags, now), _claims(tmp_path, "b", tags, now)
    a.cloud = b.cloud = None
    assert a.check(sweeping=True) is None and b.check(sweeping=True) is None


def test_renewed_every_30_s_read_before_each_pass_deleted_on_a_clean_stop(tmp_path: Path) -> None:
    tags, now = FakeTags(), [1_000_000.0]
    a = _claims(tmp_path, "a", tags, now)
    a.check()
    assert tags.calls == ["CreateTag", "DescribeTagValues"]
    now[0] += 5
    a.check()  # not due, no pass after it: no call
    a.check(sweeping=True)  # a pass follows: read
    assert tags.calls[2:] == ["DescribeTagValues"]
    now[0] += RENEW_EVERY
    a.check()  # due: a new value, the old one deleted
    assert tags.calls[3:] == ["CreateTag", "DescribeTagValues", "DeleteTag"]
    assert len(tags.pairs) == 1
    a.release()
    assert tags.pairs == set()


def test_an_account_whose_claims_cannot_be_read_is_not_swept(tmp_path: Path) -> None:
    tags, now = FakeTags(), [1_000_000.0]
    a = _claims(tmp_path, "a", tags, now)
    assert a.cloud is not None
    assert a.cloud.unproven(KEYS, REGION) == "its identity claims not read yet"
    assert a.check(sweeping=True) is None
    assert a.cloud.unproven(KEYS, REGION) is None
    tags.broken = True  # say, a CAM policy without tag:DescribeTagValues
    now[0] += 5
    assert a.check(sweeping=True) is None  # no rival seen: the pools run on
    assert a.cloud.unproven(KEYS, REGION) == "its identity claims could not be read (RuntimeError)"
    tags.broken = False
    now[0] += 5
    a.check(sweeping=True)
    assert a.cloud.unproven(KEYS, REGION) is None
