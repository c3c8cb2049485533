"""A retired notice cannot surge again (issue 41, item 4): once the surge a notice started was
deleted as NoticeUnfulfilled (its instance outlived the grace), a freshly signed notice for the
same instance starts no second surge — before, the instance's token could buy one paid surge
instance after another. Without the real stack (fakes); the status keeps the memory, so a
replica that takes the pool over keeps refusing too."""

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from spotpool.api import notices
from tests.operator.fakes import noticed_world, ref, run

pytestmark = pytest.mark.unit


def _notice(key: str, slot: int, instance: str, at: datetime) -> tuple[bytes, str]:
    when = (at + timedelta(seconds=120) + notices.BEIJING).strftime("%Y-%m-%d %H:%M:%S")
    fields = {"poolUid": "uid-gpu", "slot": slot, "instanceId": instance, "terminationTime": when}
    body = json.dumps(fields).encode()
    return body, notices.sign(notices.slot_token(key, slot, ""), int(time.time()), body)


def test_an_instance_whose_notice_went_unfulfilled_gets_no_second_surge(tmp_path: Path) -> None:
    world, body, first = noticed_world(tmp_path)
    reconciler = world.reconciler
    pool = reconciler.pool(ref(body))
    key = reconciler.settings.engine.notice_key("uid-gpu")
    received = datetime.now(UTC).replace(microsecond=0)
    reconciler.clock = lambda: received
    assert reconciler.receive_notice(*_notice(key, 0, first[0], received))[0] == 202
    run(reconciler.start_surges(ref(body)))
    assert [s.slot for s in pool.status.surges] == [0]

    later = received + timedelta(seconds=reconciler.settings.notice_grace + 1)
    reconciler.clock = lambda: later  # the instance still runs: the notice was not true
    run(reconciler.retire_stale_surges(ref(body)))
    assert pool.status.surges == [] and world.events.reasons()[-1] == "NoticeUnfulfilled"

    # The same instance's token, a fresh signature, a fresh termination time.
    code, message = reconciler.receive_notice(*_notice(key, 0, first[0], later))
    assert code == 409 and "no second replacement" in message
    run(reconciler.start_surges(ref(body)))
    assert pool.status.surges == []
    assert world.cluster.last("team-a/gpu")["notices"]["unfulfilled"] == [first[0]]
    assert [c[0] for c in world.cloud.calls].count("start_surge") == 1
    value = world.metrics.registry.get_sample_value(
        "spotpool_notice_reports_total", {"result": "unfulfilled"}
    )
    assert value == 1

    # Another slot's instance is not touched by it.
    assert reconciler.receive_notice(*_notice(key, 1, first[1], later))[0] == 202
