"""The namespace limit on three operator replicas (real kube-apiserver, three operator processes
holding two shards each, one emulator, one backend; issue 46, build 1): 20 pools applied by one
`kubectl apply` under a limit of 10 instances, served by all three, never run more than 10 —
the ledger is the policy's status at the API server, shared by every replica, not anyone's
memory. The namespace's live instances are sampled every second; the highest is printed."""

from pathlib import Path
from typing import Any

import pytest

from tests.e2e._support.limits import limit, race, reservations
from tests.e2e._support.replicas import Replicas

pytestmark = [pytest.mark.e2e, pytest.mark.heavy]
SHARDS = 6


@pytest.fixture
def replica_options() -> dict[str, Any]:
    # 20 pools: their namespace is left terminating at the end (20 destroys take minutes)
    return {"shards": SHARDS, "namespace_prefix": "lr-", "refresh_seconds": 60,
            "delete_pools": False}  # fmt: skip


def test_twenty_pools_at_once_on_three_replicas_never_pass_a_limit_of_ten(
    replicas: Replicas, tmp_path: Path
) -> None:
    a, *_ = [replicas.start(name) for name in ("a", "b", "c")]
    a.wait_until(lambda: sorted(len(s) for s in replicas.held().values()) == [2, 2, 2],
                 "a 2/2/2 split of the shards", 90)  # fmt: skip
    ns = a.namespace()
    policy = limit(a, ns, instances=10)
    try:
        most, running, held = race(a, ns, tmp_path, 20)
        served = {
            name for name, world in replicas.replicas.items()
            if f"up of {ns}." in world.log.read_text(errors="replace")
        }  # fmt: skip
        print(f"\n[limits] 20 pools of 1 at once on 3 replicas ({len(served)} ran ups), "
              f"limit 10: at most {most} live, {running} running, {held} held")  # fmt: skip
        assert most <= 10 and (running, held) == (10, 10)
        assert served == {"a", "b", "c"}
        assert sum(r["instances"] for r in reservations(a, policy).values()) == 10
    finally:
        a.kube.run("delete", "spotpoolaccesspolicies", policy, "--wait=false")
