"""Termination notices bounded, end to end (real kube-apiserver, operator process, Pulumi engine,
emulator; issue 20, item 5). The reports come from the test as an attacker makes them: with a
slot's token read from an instance's user data through DescribeInstancesAttributes, the API
anyone with read-only CVM access may call.

- A signed report with an impossible date gets 400 (was 500), a far-future or past time 422
  (a far-future one kept a surge for ever, a past one made one a minute per slot), and no
  surge instance is made for any of them.
- A surge started on a report within bounds, whose instance the cloud never takes, is deleted
  at the surge's longest life (here 40 s) instead of 600 s past the reported time.
- After a reclaim, the token read from the slot's earlier instance is refused for the slot's
  new instance (it was accepted: the token was the slot's).
- A flood of connections holds at most the endpoint's per-address bound, each closed after
  10 s; a flood of reports is answered 429 past the rate.
"""

import base64
import json
import select
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr
from tencentcloud.cvm.v20170312 import models

from spotpool.api import notices
from spotpool.engine.tencent import cloud
from spotpool.engine.tencent.credentials import Credentials
from spotpool.localworld.emulator import wait_until
from tests.e2e._support.pool_views import by_slot
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
REGION = "ap-singapore"
MAX_LIFE = 40.0  # the surge's longest life in these worlds (--surge-max-life)
PER_PEER = 32  # the endpoint's bound on connections from one address (NoticeLimits)
PEER_BURST, PEER_RATE = 100, 20.0  # its bucket of reports from one address (NoticeLimits)


@pytest.fixture
def notice_options() -> dict[str, Any]:
    return {"namespace_prefix": "bounds-", "env": {"SPOTPOOL_SURGE_MAX_LIFE": str(MAX_LIFE)}}


def _agent_settings(notice_world: OperatorWorld, instance_id: str) -> dict[str, str]:
    """What a reader of instance attributes sees of the agent: its settings, token included."""
    keys = Credentials(
        secret_id=SecretStr(notice_world.emulator.secret_id),
        secret_key=SecretStr(notice_world.emulator.secret_key),
    )
    client = cloud.cvm(keys, REGION, notice_world.emulator.endpoint)
    request = models.DescribeInstancesAttributesRequest()
    request.from_json_string(json.dumps({"InstanceIds": [instance_id], "Attributes": ["UserData"]}))
    reply = client.DescribeInstancesAttributes(request)
    return notices.agent_settings(
        base64.b64decode(reply.InstanceSet[0].Attributes.UserData).decode()
    )


def _port(notice_world: OperatorWorld) -> int:
    return int(notice_world.env["SPOTPOOL_NOTICE_PORT"])


def _beijing(when: datetime) -> str:
    return (when + notices.BEIJING).strftime("%Y-%m-%d %H:%M:%S")


def _post(
    notice_world: OperatorWorld, settings: dict[str, str], instance_id: str, when: str,
    nonce: str | None = None,
) -> tuple[int, str]:  # fmt: skip
    """A report signed with `settings`' token (naming `nonce`, by default the settings' own)."""
    fields: dict[str, Any] = {
        "poolUid": settings["SPOTPOOL_NOTICE_POOL"],
        "slot": int(settings["SPOTPOOL_NOTICE_SLOT"]),
        "instanceId": instance_id,
        "terminationTime": when,
    }
    named = settings.get("SPOTPOOL_NOTICE_NONCE", "") if nonce is None else nonce
    if named:
        fields["nonce"] = named
    body = json.dumps(fields).encode()
    signature = notices.sign(settings["SPOTPOOL_NOTICE_TOKEN"], int(time.time()), body)
    port = _port(notice_world)
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{notices.REPORT_PATH}", data=body, method="POST",
        headers={"Content-Type": "application/json", notices.SIGNATURE_HEADER: signature},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.load(reply)["message"]
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def _notice_results(world: OperatorWorld) -> dict[str, float]:
    """spotpool_notice_reports_total by result, as the operator's metrics say it now."""
    return {
        sample.labels["result"]: sample.value
        for family in text_string_to_metric_families(world.metrics())
        for sample in family.samples
        if sample.name == "spotpool_notice_reports_total"
    }


def test_report_times_are_bounded_and_a_surge_lives_at_most_its_cap(
    notice_world: OperatorWorld,
) -> None:
    ns = notice_world.namespace()
    notice_world.apply(ns, pool_manifest("gpu", replicas=2, refreshInterval="10s"))
    pool = notice_world.wait_ready(ns, "gpu", 2)
    uid, first = pool["metadata"]["uid"], by_slot(pool["status"])
    slot0 = _agent_settings(notice_world, first[0])
    now = datetime.now(UTC)

    code, message = _post(notice_world, slot0, first[0], "2026-02-30 10:00:00")
    assert code == 400, message  # no such day
    code, message = _post(notice_world, slot0, first[0], _beijing(now + timedelta(days=3650)))
    assert code == 422 and "ahead" in message, message
    code, message = _post(notice_world, slot0, first[0], _beijing(now - timedelta(minutes=10)))
    assert code == 422 and "passed" in message, message
    # The operator counts each report's outcome as it decides it: three refused, none taken.
    counted = _notice_results(notice_world)
    assert (counted["malformed"], counted["bad_time"], counted["accepted"]) == (1, 2, 0), counted
    status = notice_world.status(ns, "gpu")
    assert not status.get("surges") and status["notices"]["total"] == 0
    assert sorted(notice_world.cloud(uid)) == sorted(first.values())  # nothing made

    # Within bounds (nine minutes out), but the cloud never takes the instance.
    code, message = _post(notice_world, slot0, first[0], _beijing(now + timedelta(minutes=9)))
    accepted = time.monotonic()
    assert code == 202, message

    def surging() -> dict[str, Any] | None:
        surges = notice_world.status(ns, "gpu").get("surges") or []
        return surges[0] if surges else None

    surge = notice_world.wait_until(surging, "the surge instance", timeout=90)
    assert surge["replacing"] == first[0] and surge["receivedTime"] and surge["startTime"]
    assert surge["instanceId"] in notice_world.cloud(uid)

    def retired() -> bool:
        return not notice_world.status(ns, "gpu").get("surges") and surge[
            "instanceId"
        ] not in notice_world.cloud(uid)

    notice_world.wait_until(
        retired, "the surge's retirement at its longest life", timeout=MAX_LIFE + 90
    )
    lived = time.monotonic() - accepted
    # Before: retired 600 s past the reported time, 9 min out: some 1,140 s after the report.
    assert lived < MAX_LIFE + 90, lived
    print(f"surge retired {lived:.1f} s after its report was accepted (cap {MAX_LIFE:.0f} s)")
    status = notice_world.status(ns, "gpu")
    assert by_slot(status) == first  # the slots' own instances were never touched
    assert sorted(notice_world.cloud(uid)) == sorted(first.values())
    assert "NoticeUnfulfilled" in notice_world.reasons(ns, "gpu")
    assert status["notices"]["accepted"] == []


def _open(port: int, count: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(count)]


def _still_open(socks: list[socket.socket]) -> int:
    """How many the server has not closed (a closed one is readable: a 503 or EOF)."""
    readable, _, _ = select.select(socks, [], [], 0.5)
    return len(socks) - len(readable)


def test_an_old_instances_token_is_refused_and_floods_are_capped(
    notice_world: OperatorWorld,
) -> None:
    ns = notice_world.namespace()
    notice_world.apply(ns, pool_manifest("gpu", replicas=1, refreshInterval="60s"))
    pool = notice_world.wait_ready(ns, "gpu", 1)
    old_id = by_slot(pool["status"])[0]
    old = _agent_settings(notice_world, old_id)  # read while it lived, by anyone with read access
    notice_world.emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": [old_id]})

    def replaced() -> str | None:
        status = notice_world.status(ns, "gpu")
        now = by_slot(status).get(0)
        return now if now not in (None, old_id) and status.get("readyReplicas") == 1 else None

    new_id = notice_world.wait_until(replaced, "the reclaimed slot's new instance", timeout=120)
    new = _agent_settings(notice_world, new_id)
    assert new["SPOTPOOL_NOTICE_NONCE"] != old["SPOTPOOL_NOTICE_NONCE"]
    assert notice_world.status(ns, "gpu")["instances"][0]["nonce"] == new["SPOTPOOL_NOTICE_NONCE"]
    when = _beijing(datetime.now(UTC) + timedelta(minutes=2))

    code, message = _post(notice_world, old, new_id, when)  # the old token, naming the new instance
    assert code == 401 and "another generation" in message, message
    code, message = _post(notice_world, old, new_id, when, nonce=new["SPOTPOOL_NOTICE_NONCE"])
    assert code == 401 and "signature" in message, message  # the new nonce, the old token
    status = notice_world.status(ns, "gpu")
    assert not status.get("surges") and status["notices"]["total"] == 0

    # A flood of connections: the endpoint holds its bound, each for 10 s at most.
    port = _port(notice_world)
    socks = _open(port, 300)
    try:
        time.sleep(1.0)
        held = _still_open(socks)
        assert held <= PER_PEER, held
        # Closed by the endpoint 10 s after they opened (1.5 s ago): waited for, not slept.
        wait_until(lambda: _still_open(socks) == 0, "every held connection closed", 10.5)
    finally:
        for sock in socks:
            sock.close()
    print(f"300 connections opened: {held} held, the rest refused; all closed after 10 s")

    # A flood of reports: past the rate, 429 before anything else is done with them. Sent
    # from 8 threads, so that a loaded machine still floods; what gets through is bounded by
    # the address's bucket (100 at once, 20 a second), however long the flood took.
    started = time.monotonic()
    with ThreadPoolExecutor(8) as senders:
        codes = list(senders.map(lambda _: _post(notice_world, old, new_id, when)[0], range(150)))
    took = time.monotonic() - started
    let_through = len(codes) - codes.count(429)
    assert set(codes) <= {401, 429} and codes.count(429) > 0, codes
    assert let_through <= PEER_BURST + PEER_RATE * took + 1, (let_through, took)
    print(f"150 reports at once: {codes.count(429)} answered 429, {codes.count(401)} 401")

    # The instance's own token still works after all that, once the address's bucket holds a
    # token again (20 a second): a 429 until then, then its answer.
    def answered() -> tuple[int, str] | None:
        reply = _post(notice_world, new, new_id, when)
        return reply if reply[0] != 429 else None

    code, message = wait_until(answered, "the address's bucket refilled", 10, every=0.1)
    assert code == 202, message
