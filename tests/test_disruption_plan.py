"""Batch planning of spec.disruption (pure): batch sizes, surge / delete-first split, the
do-not-disrupt slots last, the annotation's parsing and the spec's validation."""

import pytest
from pydantic import ValidationError

from spotpool.api.spec import Disruption
from spotpool.engine.stacks.disruption import (
    Batch,
    batch_count,
    parse_do_not_disrupt,
    plan_batches,
    replaced_slots,
)

pytestmark = pytest.mark.unit

URN = "urn:pulumi:s::spotpool::spotpool:index:SpotPool$tencentcloud:Instance/instance:Instance::gpu"


def test_six_slots_two_unavailable_no_surge_three_batches() -> None:
    batches = plan_batches(range(6), max_unavailable=2, max_surge=0)
    assert [b.slots for b in batches] == [[0, 1], [2, 3], [4, 5]]
    assert all(b.surge == () for b in batches)


def test_surge_slots_first_in_each_batch() -> None:
    batches = plan_batches([0, 1, 2, 3, 4], max_unavailable=1, max_surge=2)
    assert batches == [Batch(surge=(0, 1), delete_first=(2,)), Batch(surge=(3, 4), delete_first=())]


def test_do_not_disrupt_goes_last() -> None:
    batches = plan_batches(range(6), 2, 0, protected={1, 3})
    assert [b.slots for b in batches] == [[0, 2], [4, 5], [1, 3]]
    # A protected slot the change does not replace changes nothing.
    assert [b.slots for b in plan_batches([0, 2], 1, 0, protected={1})] == [[0], [2]]


def test_nothing_replaced_no_batch() -> None:
    assert plan_batches([], 1, 1) == []
    assert batch_count(range(7), 2, 1) == 3


@pytest.mark.parametrize(("unavailable", "surge"), [(0, 0), (-1, 2)])
def test_invalid_bounds(unavailable: int, surge: int) -> None:
    with pytest.raises(ValueError):
        plan_batches(range(3), unavailable, surge)


def test_replaced_slots_from_preview_steps() -> None:
    steps = [
        (f"{URN}-slot-0", "create-replacement"),
        (f"{URN}-slot-0", "delete-replaced"),
        (f"{URN}-slot-1", "update"),
        (f"{URN}-slot-2", "replace"),
        (f"{URN}-slot-3", "same"),
        (f"{URN}-slot-4-surge", "replace"),  # a surge instance is no slot
        (f"{URN}-slot-5", "create"),
    ]
    assert replaced_slots(steps) == [0, 2]


def test_parse_annotation() -> None:
    assert parse_do_not_disrupt("3,5") == {3, 5}
    assert parse_do_not_disrupt(" 3, x, 5 ,") == {3, 5}
    assert parse_do_not_disrupt(None) == frozenset()


def test_spec_defaults_and_validation() -> None:
    assert Disruption() == Disruption(max_unavailable=1, max_surge=1)
    assert Disruption.model_validate({"maxUnavailable": 0, "maxSurge": 2}).max_surge == 2
    with pytest.raises(ValidationError, match="cannot both be 0"):
        Disruption.model_validate({"maxUnavailable": 0, "maxSurge": 0})
    with pytest.raises(ValidationError):
        Disruption.model_validate({"maxUnavailable": -1})


def test_a_rank_orders_the_batches_protected_slots_still_last() -> None:
    # The operator's rank for a node pool: pods on each slot's node, the emptiest first.
    pods = {0: 5, 1: 0, 2: 3, 3: 0}
    rank = {s: n for n, s in enumerate(sorted(pods, key=lambda s: (pods[s], s)))}
    batches = plan_batches(range(4), 1, 0, rank=rank)
    assert [b.slots for b in batches] == [[1], [3], [2], [0]]
    assert [b.slots for b in plan_batches(range(4), 2, 0, {1}, rank)] == [[2, 3], [0, 1]]
