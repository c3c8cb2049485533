"""What the state backend says is held (engine/leftovers/holdings.py) and which accounts it
records for the sweep (engine/leftovers/accounts.py), on a real file backend's layout."""

import gzip
import json
import os
import time
from pathlib import Path

import pytest

from spotpool.engine.leftovers.accounts import account_of, recorded_accounts, save_account
from spotpool.engine.leftovers.holdings import backend_holdings
from spotpool.engine.state.stack_state import cluster_in, tagged_for

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
    assert held.stacks == {"team-a.p", "team-b.q"} and held.doubt is None


def _doubt(url: str, install: str | None = None) -> str:
    held = backend_holdings(url, install)
    assert held is not None and held.doubt is not None
    return held.doubt


def test_a_backend_that_cannot_be_read_in_full_proves_nothing(tmp_path: Path) -> None:
    stacks = tmp_path / ".pulumi" / "stacks" / "spotpool"
    stacks.mkdir(parents=True)
    (stacks / "team-a.p.json.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    assert "zstd" in _doubt(f"file://{tmp_path}")
    (stacks / "team-a.p.json.zst").unlink()
    (stacks / "team-a.p.json").write_text("{not json")
    assert "could not be read in full" in _doubt(f"file://{tmp_path}")
    assert backend_holdings("https://api.pulumi.com") is None  # not self-managed
    (stacks / "team-a.p.json").unlink()
    (tmp_path / ".pulumi" / "meta.yaml").write_text("version: 7\n")
    assert "layout" in _doubt(f"file://{tmp_path}")  # a version this release does not know
    assert "absolute path" in _doubt("file://relative/backend")  # each run would differ


def test_pulumis_older_flat_layout_is_read(tmp_path: Path) -> None:
    """No meta.yaml, the stacks straight under .pulumi/stacks (what `pulumi` made before
    project mode, and makes still with PULUMI_SELF_MANAGED_STATE_LEGACY_LAYOUT)."""
    stacks = tmp_path / ".pulumi" / "stacks"
    stacks.mkdir(parents=True)
    (stacks / "team-a.p.json").write_bytes(_checkpoint("ins-flat"))
    (stacks / "team-a.p.json.bak").write_bytes(_checkpoint("ins-old"))  # a backup holds nothing
    held = backend_holdings(f"file://{tmp_path}")
    assert held is not None and held.doubt is None
    assert held.instances == {"ins-flat"} and held.stacks == {"team-a.p"}


def test_file_urls_are_read_where_pulumi_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`~` is the account's home (as Go's os/user), `?no_tmp_dir=true` gocloud's option."""
    import pwd

    from spotpool.engine.state.backend_files import file_root

    home = pwd.getpwuid(os.getuid()).pw_dir
    monkeypatch.setenv("HOME", str(tmp_path / "not-the-accounts"))  # Pulumi does not ask it
    assert file_root("file://~/state") == Path(home) / "state"
    assert file_root("file://~") == Path(home)
    assert file_root(f"file://{tmp_path}?no_tmp_dir=true") == tmp_path


def test_a_directory_it_cannot_list_is_an_error_not_an_empty_listing(tmp_path: Path) -> None:
    """As a user the directory denies (root reads every directory: a uid of its own)."""
    import subprocess
    import sys

    stacks = tmp_path / "backend" / ".pulumi" / "stacks" / "spotpool"
    stacks.mkdir(parents=True)
    (stacks / "team-a.p.json").write_bytes(_checkpoint("ins-a1"))
    for folder in (tmp_path, tmp_path / "backend", tmp_path / "backend" / ".pulumi"):
        folder.chmod(0o755)
    (tmp_path / "backend" / ".pulumi" / "stacks").chmod(0o755)
    stacks.chmod(0o700)  # owned by root: the other uid cannot list it
    code = (
        "import sys; from spotpool.engine.leftovers.holdings import backend_holdings; "
        "h = backend_holdings(sys.argv[1]); print(h.doubt if h else 'none')"
    )
    read = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
         code, f"file://{tmp_path / 'backend'}"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "PermissionError" in read.stdout, read.stdout + read.stderr


def test_the_install_marker_is_written_once_and_required(tmp_path: Path) -> None:
    from spotpool.engine.leftovers.install_marker import mark_install

    backend = f"file://{tmp_path}"
    assert "no marker of install ops.x" in _doubt(backend, "ops.x")
    first = mark_install(backend, "ops.x", "c-1")
    assert first is not None and mark_install(backend, "ops.x", "c-2") == first  # kept
    held = backend_holdings(backend, "ops.x")
    assert held is not None and held.doubt is None and held.since == first
    assert "no marker of install ops.y" in _doubt(backend, "ops.y")  # another install's


def test_accounts_are_recorded_by_where_their_keys_come_from_never_the_keys(
    tmp_path: Path,
) -> None:
    backend = f"file://{tmp_path}"
    # A spec with inline keys beside its Secret (the CRD refuses both; the record must not
    # lean on that): the keys would reach the record if it copied more than the sources.
    spec = {"credentialsSecretRef": {"name": "keys"}, "region": "ap-singapore",
            "secretId": "AKID-inline", "secretKey": "inline-secret-key"}  # fmt: skip
    record = account_of("team-a", spec, "ap-singapore")
    assert record is not None
    assert account_of("team-a", {"secretId": "AKID", "secretKey": "k"}, "ap-singapore") is None
    save_account(backend, record)
    text = "".join(p.read_text() for p in (tmp_path / ".spotpool" / "accounts").iterdir())
    assert "AKID" not in text and "inline-secret-key" not in text and '"keys"' in text
    assert recorded_accounts(backend, keep=3600) == [record]
    old = record.model_copy(update={"seen": time.time() - 7200})
    save_account(backend, old)
    assert recorded_accounts(backend, keep=3600) == []  # expired, and removed
    assert not list((tmp_path / ".spotpool" / "accounts").iterdir())


def _state(*tags: dict[str, str]) -> dict[str, object]:
    return {
        "resources": [
            {"type": SLOT, "id": f"ins-{n}", "urn": f"urn:x::gpu-slot-{n}", "outputs": {"tags": t}}
            for n, t in enumerate(tags)
        ]
    }


def test_a_stack_whose_instances_lack_this_clusters_tag_is_not_taken_as_applied() -> None:
    """The first start after the upgrade, or a rebuilt cluster: one `up` tags them."""
    mine = {"spotpool-install": "i", "spotpool-cluster": "c-1"}
    assert tagged_for(_state(mine, mine), "c-1")
    assert not tagged_for(_state(mine, {"spotpool-install": "i"}), "c-1")
    assert not tagged_for(_state({**mine, "spotpool-cluster": "old"}), "c-1")
    # another install of this cluster (a pool moved to another operatorClass): no up for it
    assert tagged_for(_state({**mine, "spotpool-install": "other"}), "c-1")
    # … asked with the install: an earlier release's unmarked value, or a pool moved to
    # another install (operatorClass), runs one up that re-tags it (issue 48)
    marked = {**mine, "spotpool-install": "i/v2"}
    assert tagged_for(_state(marked, marked), "c-1", "i")
    assert not tagged_for(_state(marked, mine), "c-1", "i")
    assert not tagged_for(_state({**mine, "spotpool-install": "other/v2"}), "c-1", "i")
    assert tagged_for(_state({"spotpool-install": "i"}), None)  # by hand: no check
    assert cluster_in(_state({"spotpool-install": "i"}, mine)) == "c-1"


def test_the_fast_paths_launch_is_tagged_as_the_program_tags() -> None:
    from spotpool.api.spec import SpotpoolSpec
    from spotpool.api.stackconfig import PoolIdentity, StackConfig
    from spotpool.engine.launches.fast_launch import run_instances_request

    spec = {"region": "ap-singapore", "availabilityZone": "ap-singapore-2", "minimum": 1,
            "maximum": 2, "instanceType": "GN7.2XLARGE32", "imageId": "img-1",
            "credentialsSecretRef": {"name": "keys"}}  # fmt: skip
    config = StackConfig.from_spec(
        PoolIdentity(namespace="team-a", name="gpu", uid="u-1"), SpotpoolSpec.model_validate(spec)
    )
    body = run_instances_request(config, 0, "ops.x", None, None, None, "", "c-1")
    (spec_tags,) = body["TagSpecification"]
    tags = {t["Key"]: t["Value"] for t in spec_tags["Tags"]}
    assert tags["spotpool-install"] == "ops.x/v2" and tags["spotpool-cluster"] == "c-1"
