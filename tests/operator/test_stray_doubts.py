"""The sweep on a doubtful read of the backend (issue 48, build 3) and a failed termination
mid-pass (build 5), over test_stray_sweep's fakes: a doubt reports what would go, with the
reason, in an Event on the install (once) and on the deleted pool; an instance made before the
install's marker is reported; a re-created pool whose stack the read did not find makes the
read doubtful; each batch sent is audited before the next is sent."""

from datetime import timedelta
from typing import Any

import pytest

from tests.operator.fakes import run
from tests.operator.stray_world import GRACE, NOW, World, instance

pytestmark = pytest.mark.unit
LEASE = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
         "metadata": {"namespace": "ops", "name": "spotpool"}}  # fmt: skip


def _reasons(world: World) -> list[str]:
    return [reason for _, reason, _ in world.events.posted]


def test_a_doubtful_read_reports_with_its_reason_once_on_the_install() -> None:
    world = World([instance("i-1", "gone"), instance("i-2", "gone")], set(), {"gone"})
    world.backend_says = {"kept": frozenset(), "doubt": "the state backend proves nothing: X"}
    sweep = world.sweep()
    sweep.install_object = LEASE
    assert sorted(world.two_passes(sweep)) == ["i-1", "i-2"]
    run(sweep.sweep())
    assert world.terminated == [] and world.reported == 2
    assert _reasons(world).count("SweepReportsOnly") == 1  # once a reason, not every pass
    found = [m for _, r, m in world.events.posted if r == "OrphanFound"]
    assert len(found) == 2 and all("proves nothing: X" in m for m in found)


def test_an_instance_made_before_the_install_marker_is_only_reported() -> None:
    world = World(
        [instance("i-before", "gone", age=7200), instance("i-after", "gone", age=600)],
        set(),
        {"gone"},
    )
    world.backend_says = {"kept": frozenset(), "since": NOW - timedelta(hours=1)}
    sweep = world.sweep()
    run(sweep.sweep())
    world.now += timedelta(seconds=GRACE)
    done = {d.instance_id: d for d in run(sweep.sweep())}
    assert world.terminated == ["i-after"]
    assert "made before this install's marker" in done["i-before"].reason


def test_a_recreated_pool_whose_stack_the_read_did_not_find_makes_it_doubtful() -> None:
    world = World([instance("i-1", "old-uid", pool="team-a/web")], set(), {"old-uid"})
    names: list[set[str]] = []

    def live(asked: Any) -> set[str]:
        names.append(set(asked))
        return {"team-a/web"}  # applied again under a new uid (paused, say)

    sweep = world.sweep()
    sweep.pool_names = live
    assert world.two_passes(sweep) == ["i-1"] and world.terminated == []
    assert names[-1] == {"team-a/web"}
    assert "exists again" in world.events.posted[-1][2]
    world.backend_says = {"kept": frozenset(), "stacks": frozenset({"team-a.web"})}
    again = world.sweep()
    again.pool_names = live  # its stack found: the read is whole, i-1 unheld goes
    assert world.two_passes(again) == ["i-1"] and world.terminated == ["i-1"]


def test_a_termination_failing_mid_pass_leaves_every_sent_batch_audited(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World([instance("i-a", "gone-a"), instance("i-b", "gone-b")], set(),
                  {"gone-a", "gone-b"})  # fmt: skip
    sweep = world.sweep()
    real = sweep.terminate

    def second_fails(keys: Any, region: str, ids: list[str], check: Any) -> None:
        if world.terminated:
            raise RuntimeError("InternalError")
        real(keys, region, ids, check)

    sweep.terminate = second_fails
    run(sweep.sweep())
    world.now += timedelta(seconds=GRACE)
    with caplog.at_level("INFO"):
        run(sweep.sweep())  # the account's failure is logged, the pass goes on
    assert world.terminated == ["i-a"]
    assert world.counted == 1 and sweep.swept == 1
    assert [(r, "i-a" in m) for _, r, m in world.events.posted] == [("OrphanSwept", True)]
    text = caplog.text
    assert "terminating 1 instance(s) of deleted pool gone-b: i-b" in text  # before the send
    assert "TerminateInstances of i-b failed" in text


def test_a_deleted_pools_stack_that_stays_is_a_gauge_and_one_event() -> None:
    """Its instance held by the stack of a pool no Spotpool has the name of any more."""
    world = World([instance("i-1", "old-uid", pool="team-a/web")], set(), {"old-uid"})
    world.held = frozenset({"i-1"})
    world.backend_says = {"kept": frozenset(), "stacks": frozenset({"team-a.web"})}
    counted: list[int] = []
    sweep = world.sweep()
    sweep.pool_names = lambda names: set()  # no pool has the name again
    sweep.orphaned.install_object, sweep.orphaned.gauge = LEASE, counted.append
    assert world.two_passes(sweep) == [] and world.terminated == []
    run(sweep.sweep())
    assert counted[-1] == 1 and sweep.orphaned.found == {"team-a.web"}
    (event,) = [m for _, r, m in world.events.posted if r == "StackOrphaned"]
    assert "stack team-a.web holds instance(s) i-1" in event
