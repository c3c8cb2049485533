"""Which stored writer wins over a replica's status write (the real API server's side is in
tests/e2e/test_status_fencing.py)."""

import pytest
from spotpool_operator.reporting.status_write import newer, present

pytestmark = pytest.mark.unit

MINE = {"lease": "sp-shard-3", "leaseUid": "u1", "token": 4, "holder": "pod-a_1"}


def test_only_a_later_holder_of_the_same_lease_is_newer() -> None:
    assert newer({**MINE, "token": 5, "holder": "pod-b_2"}, MINE)
    assert not newer({**MINE, "token": 3, "holder": "pod-b_2"}, MINE)  # an earlier holder
    assert not newer(MINE, MINE)
    assert not newer(None, MINE)  # none recorded (a status of before writers)
    # a recreated Lease counts from 0 again; another shard count names other Leases
    assert not newer({**MINE, "leaseUid": "u2", "token": 9}, MINE)
    assert not newer({**MINE, "lease": "sp-shard-3-of-8", "token": 9}, MINE)


def test_a_whole_status_leaves_unset_fields_out() -> None:
    patch = {"size": 1, "phase": None, "reclaims": {"total": 0, "lastTime": None}, "x": [{"a": 1}]}
    assert present(patch) == {"size": 1, "reclaims": {"total": 0}, "x": [{"a": 1}]}
