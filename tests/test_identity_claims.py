"""Claims of an identity and holders of stacks (engine/leftovers/claims.py, the operator's
cloud/claims.py, engine/stacks/stack_guard.py) on a real file backend: two processes of one
identity that are not one install in one cluster are rivals, replicas and a killed
predecessor are not; another live cluster's stack is refused, taken over only when named or
its claim is old."""

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from spotpool_operator.cloud.claims import IdentityClaims

from spotpool.api.stackconfig import PoolIdentity
from spotpool.engine.basics.errors import IdentityConflict, StackHeldByAnotherCluster
from spotpool.engine.leftovers.claims import (
    LIVE_FOR,
    Claim,
    Watch,
    read_holder,
    rivals,
    takeover_refused,
)
from spotpool.engine.stacks.stack_guard import StackOwnership

pytestmark = pytest.mark.unit
SLOT = "tencentcloud:Instance/instance:Instance"


def _claim(nonce: str, renewed: float, started: float = 0.0, install: str = "i") -> Claim:
    return Claim(cluster="c", install=install, nonce=nonce, started=started, renewed=renewed)


def test_a_live_stranger_is_a_rival_a_replica_a_stopped_one_or_another_install_is_not() -> None:
    mine = _claim("me", 1000.0, started=900.0)
    watch = Watch()
    watch.saw_leases({"replica": 995.0, "clone": 500.0})  # the clone's Leases: snapshot copies
    claims = [
        mine,
        _claim("replica", 1000.0),  # renews a Lease here as it renews its claim
        _claim("clone", 1000.0),  # its Lease here stopped long before its claim
        _claim("stranger", 999.0),  # no Lease of this install here at all
        _claim("stopped", 1000.0 - LIVE_FOR - 1),
        _claim("other-install", 1000.0, install="j"),
    ]
    found = rivals(mine, claims, watch, now=1000.0, slack=75.0)
    assert sorted(c.nonce for c in found) == ["clone", "stranger"]


def test_run_by_hand_a_killed_predecessor_is_no_rival_until_it_moves() -> None:
    mine = _claim("me", 1000.0, started=990.0)
    watch = Watch()
    dead = _claim("before", 985.0)  # its last renewal came before this process started
    assert rivals(mine, [dead], watch, now=1000.0, slack=75.0, leases=False) == []
    moved = _claim("before", 995.0)  # renewed again: alive beside this one
    assert [c.nonce for c in rivals(mine, [moved], watch, 1000.0, 75.0, leases=False)] == ["before"]


def test_takeover_only_when_named_or_the_old_claim_is_old_enough() -> None:
    assert takeover_refused("me", "me", None, 0.0, 10.0, ()) is None
    assert takeover_refused("old", "me", 100.0, 200.0, 600.0, ("old",)) is None
    assert takeover_refused("old", "me", 100.0, 800.0, 600.0, ()) is None  # 700 s > 600 s
    refused = takeover_refused("old", "me", 100.0, 200.0, 600.0, ())
    assert refused and "renewed its claim 100 s ago" in refused
    assert takeover_refused("old", "me", 100.0, 10**9, 0.0, ())  # 0: never by age
    never = takeover_refused("old", "me", None, 10**9, 600.0, ())
    assert never and "no claim" in never


def test_two_processes_with_one_identity_on_one_backend_hold_each_other(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    now = [1000.0]
    a = IdentityClaims(url, "c", "i", "a_1", holders=lambda: {"a_1": now[0]},
                       clock=lambda: now[0])  # fmt: skip
    assert a.check() is None  # alone
    b = IdentityClaims(url, "c", "i", "b_1", holders=lambda: {"b_1": now[0]},
                       clock=lambda: now[0])  # fmt: skip
    problem = b.check()
    assert problem and "a_1" in problem and "docs/shards.md" in problem
    now[0] += 5
    assert a.check() is not None and "b_1" in str(a.conflict())
    # One stopped (a person resolved it): its claim ages out, the other goes on.
    now[0] += LIVE_FOR + 1
    assert a.check() is None


def test_a_replica_of_the_same_install_is_no_rival(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    leases = {"a_1": 1000.0, "a_2": 1000.0}  # both renew Leases of the install here
    a1 = IdentityClaims(url, "c", "i", "a_1", holders=lambda: leases, clock=lambda: 1000.0)
    a2 = IdentityClaims(url, "c", "i", "a_2", holders=lambda: leases, clock=lambda: 1000.0)
    assert a1.check() is None and a2.check() is None and a1.check() is None


@dataclass
class _Pool:
    name: str
    pool: PoolIdentity


def _stack(tmp_path: Path, name: str, cluster: str | None) -> None:
    stacks = tmp_path / ".pulumi" / "stacks" / "spotpool"
    stacks.mkdir(parents=True, exist_ok=True)
    tags = {"spotpool-cluster": cluster} if cluster else {}
    resources = [{"type": SLOT, "id": "ins-1", "urn": "u", "outputs": {"tags": tags}}]
    latest = {"checkpoint": {"latest": {"resources": resources}}}
    (stacks / f"{name}.json").write_text(json.dumps(latest))


def test_another_live_clusters_stack_is_refused_and_taken_over_only_when_named(
    tmp_path: Path,
) -> None:
    url = f"file://{tmp_path}"
    now = [1000.0]
    prod = IdentityClaims(url, "prod", "i", "p_1", clock=lambda: now[0])
    prod.check()  # production's operator is live
    _stack(tmp_path, "team.web", "prod")  # recorded before holder records: its tag says
    pool = _Pool("team.web", PoolIdentity(namespace="team", name="web", uid="u"))
    staging = StackOwnership(url, "staging", lambda: None, take_over_after=3600.0,
                             clock=lambda: now[0])  # fmt: skip
    with pytest.raises(StackHeldByAnotherCluster) as refused:
        staging.check(pool)
    assert refused.value.holder == "prod" and "renewed its claim 0 s ago" in str(refused.value)
    holder = read_holder(_files(tmp_path), "team.web")
    assert holder is None  # nothing written by the refused cluster

    production = StackOwnership(url, "prod", lambda: None, clock=lambda: now[0])
    assert production.check(pool) is None  # its own: the record now names it
    assert read_holder(_files(tmp_path), "team.web").cluster == "prod"  # type: ignore[union-attr]

    named = StackOwnership(url, "rebuilt", lambda: None, take_over_from=["prod"],
                           clock=lambda: now[0])  # fmt: skip
    note = named.check(pool)
    assert note and "took stack team.web over from cluster prod" in note
    assert read_holder(_files(tmp_path), "team.web").cluster == "rebuilt"  # type: ignore[union-attr]

    with pytest.raises(StackHeldByAnotherCluster, match="no claim"):  # "rebuilt" never claimed
        StackOwnership(url, "other", lambda: None, take_over_after=1.0).check(pool)

    _stack(tmp_path, "team.db", "prod")
    db = _Pool("team.db", PoolIdentity(namespace="team", name="db", uid="v"))
    now[0] += 3601  # prod's last claim older than staging's stated time: taken by age
    note = staging.check(db)
    assert note and "its last claim is 3601 s old" in note


def test_a_rival_refuses_every_run(tmp_path: Path) -> None:
    guard = StackOwnership(f"file://{tmp_path}", "c", lambda: "a rival claims it")
    pool = _Pool("team.web", PoolIdentity(namespace="team", name="web", uid="u"))
    with pytest.raises(IdentityConflict, match="a rival claims it"):
        guard.check(pool)


def _files(root: Path):  # type: ignore[no-untyped-def]
    from spotpool.engine.state.backend_files import FileBackend

    return FileBackend(root)
