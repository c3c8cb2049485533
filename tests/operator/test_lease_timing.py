"""The Lease's timing on this process's monotonic clock (lease.py), as client-go's leader
election times it: another holder's Lease expires only once it was seen unchanged for its
duration, whatever the wall clocks say; a holder holds for two thirds of the duration after
it sent its last good renewal; a renewal that reached the server first beats a takeover."""

from datetime import UTC, datetime, timedelta

import kubernetes
import pytest
from spotpool_operator.replicas.lease import OperatorLease

from tests.operator.lease_fakes import FakeClock, FakeLeases, Stalling

pytestmark = pytest.mark.unit

D = 6.0


def _wall(offset: float) -> "object":
    return lambda: datetime.now(UTC) + timedelta(seconds=offset)


def _lease(api: object, host: str, clock: FakeClock, offset: float = 0.0) -> OperatorLease:
    return OperatorLease(api, "ops", "op", D, host, _wall(offset), clock)  # type: ignore[arg-type]


@pytest.mark.parametrize("offset", [15.0, -15.0])
def test_a_holder_seen_renewing_is_never_taken_over_whatever_either_clock_says(
    offset: float,
) -> None:
    server, clock = FakeLeases(), FakeClock()
    a = _lease(server, "pod-a", clock)
    b = _lease(server, "pod-b", clock, offset)  # its wall clock 15 s ahead (or behind)
    assert a.step() and a.held()
    for _ in range(20):  # 40 s: more than six durations
        assert not b.step() and not b.held()
        clock.advance(D / 3)
        assert a.step() and a.held()
    assert server.items["op"].spec.holder_identity == a.identity


def test_a_stalled_holder_stops_a_third_of_the_duration_before_a_takeover() -> None:
    server, clock = FakeLeases(), FakeClock()
    a_api = Stalling(server)
    a = _lease(a_api, "pod-a", clock)
    b = _lease(server, "pod-b", clock, offset=15.0)
    assert a.step()
    b.step()
    a_api.down = True  # A's connection to the API server stalls; B's works
    a_stopped = b_took = None
    while b_took is None:
        clock.advance(0.25)
        with pytest.raises(TimeoutError):
            a.step()
        if a_stopped is None and not a.held():
            a_stopped = clock()
        if b.step():
            b_took = clock()
    assert a_stopped is not None
    assert b_took - a_stopped >= D / 3 - 0.25  # the margin for A's kill
    assert b_took - 1000.0 >= D  # B waited the whole duration since it saw A's last renewal
    assert "pod-a" in b.earlier_holders()


def test_a_renewal_counts_from_when_it_was_sent_not_when_it_returned() -> None:
    server, clock = FakeLeases(), FakeClock()
    a = _lease(server, "pod-a", clock)
    a.step()
    replace = server.replace_namespaced_lease

    def slow_replace(*args: object, **kwargs: object) -> object:
        clock.advance(3.0)  # the request took 3 s
        return replace(*args, **kwargs)  # type: ignore[arg-type]

    server.replace_namespaced_lease = slow_replace  # type: ignore[method-assign]
    sent = clock()
    assert a.renew()
    assert a.held_until() == sent + D * 2 / 3  # held 1 s more, not 4
    clock.advance(1.01)
    assert not a.held()


def test_a_renewal_that_reached_the_server_first_makes_a_takeover_fail() -> None:
    server, clock = FakeLeases(), FakeClock()
    a = _lease(server, "pod-a", clock)
    b = _lease(server, "pod-b", clock)
    a.step()
    stale = server.list_namespaced_lease("ops").items[0]
    b.observed.see(stale)
    clock.advance(D + 1)  # B has seen no change for longer than the duration ...
    assert a.renew()  # ... but A's renewal lands first
    with pytest.raises(kubernetes.client.ApiException) as raised:
        b.step(stale)
    assert raised.value.status == 409 and not b.held()
    assert server.items["op"].spec.holder_identity == a.identity


def test_a_lease_written_by_another_holder_is_dropped_at_once() -> None:
    server, clock = FakeLeases(), FakeClock()
    a = _lease(server, "pod-a", clock)
    a.step()
    taken = server.read_namespaced_lease("op", "ops")
    taken.spec.holder_identity = "pod-b_1234"
    server.replace_namespaced_lease("op", "ops", taken)
    assert not a.step()
    assert not a.held()  # not two thirds of a duration later
