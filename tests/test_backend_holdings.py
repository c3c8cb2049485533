"""What the state backend says is held (engine/leftovers/holdings.py) and which accounts it
records for the sweep (engine/leftovers/accounts.py), on a real file backend's layout."""

import gzip
import json
import time
from pathlib import Path

import pytest

from spotpool.engine.leftovers.accounts import account_of, recorded_accounts, save_account
from spotpool.engine.leftovers.holdings import backend_holdings

pytestmark = pytest.mark.unit
SLOT = "tencentcloud:Instance/instance:Instance"


def _checkpoint(*ids: str) -> bytes:
    resources = [{"type": "pulumi:pulumi:Stack", "urn": "urn:stack"}] + [
        {"type": SLOT, "id": i, "urn": f"urn:slot-{n}"} for n, i in enumerate(ids)
    ]
    return json.dumps({"checkpoint": {"latest": {"resources": resources}}}).encode()


def test_every_stacks_instances_intents_and_retain_records_are_held(tmp_path: Path) -> None:
    stacks = tmp_path / ".pulumi" / "stacks" / "spotpool"
    stacks.mkdir(parents=True)
    (stacks / "team-a.p.json").write_bytes(_checkpoint("ins-a1", "ins-a2"))
    (stacks / "team-b.q.json.gz").write_bytes(gzip.compress(_checkpoint("ins-b1")))
    (stacks / "team-a.p.json.attrs").write_text("{}")
    (stacks / "team-a.p.spotpool-launch.3-ab12").write_text(
        json.dumps({"pool_uid": "u", "slot": 3, "instance_id": "ins-fast"})
    )
    retained = tmp_path / ".spotpool" / "retained"
    retained.mkdir(parents=True)
    (retained / "u-old.json").write_text(json.dumps({"uid": "u-old", "instances": ["ins-k"]}))
    (retained / "u-older.json").write_text(json.dumps({"uid": "u-older"}))  # before this version

    held = backend_holdings(f"file://{tmp_path}")
    assert held is not None
    assert held.instances == {"ins-a1", "ins-a2", "ins-b1", "ins-fast", "ins-k"}
    assert held.kept == {"u-old", "u-older"}
    assert held.stacks == 2


def test_a_backend_that_cannot_be_read_in_full_proves_nothing(tmp_path: Path) -> None:
    stacks = tmp_path / ".pulumi" / "stacks" / "spotpool"
    stacks.mkdir(parents=True)
    (stacks / "team-a.p.json.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    assert backend_holdings(f"file://{tmp_path}") is None
    (stacks / "team-a.p.json.zst").unlink()
    (stacks / "team-a.p.json").write_text("{not json")
    assert backend_holdings(f"file://{tmp_path}") is None
    assert backend_holdings("https://api.pulumi.com") is None  # not self-managed


def test_accounts_are_recorded_by_where_their_keys_come_from_never_the_keys(
    tmp_path: Path,
) -> None:
    backend = f"file://{tmp_path}"
    spec = {"credentialsSecretRef": {"name": "keys"}, "region": "ap-singapore"}
    record = account_of("team-a", spec, "ap-singapore")
    assert record is not None
    assert account_of("team-a", {"secretId": "AKID", "secretKey": "k"}, "ap-singapore") is None
    save_account(backend, record)
    text = "".join(p.read_text() for p in (tmp_path / ".spotpool" / "accounts").iterdir())
    assert "AKID" not in text and '"keys"' in text
    assert recorded_accounts(backend, keep=3600) == [record]
    old = record.model_copy(update={"seen": time.time() - 7200})
    save_account(backend, old)
    assert recorded_accounts(backend, keep=3600) == []  # expired, and removed
    assert not list((tmp_path / ".spotpool" / "accounts").iterdir())
