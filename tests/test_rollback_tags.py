"""Tags a rollback cannot misread (issue 48, builds 4-5): this release's install value is one
the release before the cluster tag (install tag alone, an exact match) never matches; the
unmarked value is this install's only with this cluster's tag; a Retain tags every instance its
stack held, whatever its install tag, and tries a failed tag again."""

import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from spotpool.api.stackconfig import install_tag
from spotpool.engine.leftovers import retained
from spotpool.engine.leftovers.orphans import Tagged, owner_problem
from spotpool.engine.state.backend_files import open_backend
from spotpool.engine.tencent import cloud
from spotpool.engine.tencent.cloud import FleetInstance

pytestmark = pytest.mark.unit
INSTALL = "spotpool-system.spotpool-operator"  # every default install's id


def _previous_release_matches(tag: str | None) -> bool:
    """The sweep before the cluster tag (git 0290ed7^, strays.py): `item.install ==
    self.install_id`, nothing else asked."""
    return tag == INSTALL


def _tagged(install: str | None, cluster: str | None) -> Tagged:
    return Tagged("ins-1", 0, "RUNNING", "GN7", "ap-singapore-2", install,
                  datetime.now(UTC), cluster=cluster)  # fmt: skip


def test_this_releases_value_is_never_the_previous_releases_match() -> None:
    assert install_tag(INSTALL) != INSTALL and not _previous_release_matches(install_tag(INSTALL))


def test_the_unmarked_value_is_ours_only_with_this_clusters_tag() -> None:
    assert owner_problem(_tagged(install_tag(INSTALL), "c-1"), INSTALL, "c-1") is None
    assert owner_problem(_tagged(INSTALL, "c-1"), INSTALL, "c-1") is None
    assert "another cluster" in str(owner_problem(_tagged(INSTALL, "c-2"), INSTALL, "c-1"))
    assert "no spotpool-cluster" in str(owner_problem(_tagged(INSTALL, None), INSTALL, "c-1"))
    assert "another install" in str(owner_problem(_tagged("x/v2", "c-1"), INSTALL, "c-1"))


def _pool(backend: str) -> Any:
    settings = SimpleNamespace(backend_url=backend, cloud_endpoint=None, install_id=INSTALL)
    return SimpleNamespace(settings=settings, pool=SimpleNamespace(uid="u-1"), name="ns.p",
                           credentials=None, region="ap-singapore")  # fmt: skip


def _instance(instance_id: str, install: str | None) -> FleetInstance:
    return FleetInstance.model_validate(
        {"instance_id": instance_id, "slot": 0, "state": "RUNNING", "instance_type": "GN7",
         "zone": "ap-singapore-2", "install": install, "pool_uid": "u-1"}
    )  # fmt: skip


def test_a_retain_tags_every_held_instance_and_tries_a_failed_tag_again(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed = [
        _instance("ins-moved", "other-install/v2"),  # held: the pool came from another install
        _instance("ins-ours", install_tag(INSTALL)),  # this install's, not (yet) in the state
        _instance("ins-theirs", "other-install/v2"),  # another install's, not held: left
    ]
    tagged: list[str] = []
    failures = {"ins-ours": 1}  # its first tag fails, its second lands

    def mark(client: Any, ids: list[str], when: str) -> None:
        (instance_id,) = ids
        if failures.get(instance_id, 0):
            failures[instance_id] -= 1
            raise RuntimeError("RequestLimitExceeded")
        tagged.append(instance_id)

    monkeypatch.setattr(cloud, "cvm", lambda *a: object())
    monkeypatch.setattr(cloud, "pool_instances", lambda client, uid: listed)
    monkeypatch.setattr(cloud, "mark_retained", mark)
    monkeypatch.setattr(time, "sleep", lambda s: None)
    notes = retained.mark_retained(_pool(f"file://{tmp_path}"), iter(["ins-moved"]))
    assert notes == [] and sorted(tagged) == ["ins-moved", "ins-ours"]
    files = open_backend(f"file://{tmp_path}")
    assert files is not None
    kept, named = retained.retained_records(files)
    assert kept == {"u-1"} and named == {"ins-moved"}  # a generator of held ids, read once

    failures["ins-ours"] = 5  # fails every try: said, the backend's record stands
    notes = retained.mark_retained(_pool(f"file://{tmp_path}"), ["ins-moved"])
    assert len(notes) == 1 and "ins-ours (RuntimeError)" in notes[0]
