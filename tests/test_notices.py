"""Termination notices without any process: tokens, signatures, the user data that installs the
agent, the agent's wire format, and the operator's checks on a report (who may say what)."""

import email
import json
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import psutil
import pytest
import yaml
from spotpool_operator.basics.failures import PoolProblem
from spotpool_operator.process.reconciler import Reconciler
from spotpool_operator.reporting.metrics import NOTICE_RESULTS, Metrics

from spotpool.api import notices
from spotpool.api.notices import NoticeAgent, NoticeReport
from spotpool.api.stackconfig import PoolIdentity, StackConfig
from spotpool.api.status import Instance, Surge
from spotpool.notices import agent
from tests.operator.fakes import make_world, noticed_world, pool_body, ref, run

pytestmark = pytest.mark.unit

AGENT = NoticeAgent(url="http://10.0.0.5:8090", command="spotpool notice-agent")


def test_tokens_differ_per_pool_and_slot_and_need_the_secret() -> None:
    key_a, key_b = notices.pool_key(b"s1", "uid-a"), notices.pool_key(b"s1", "uid-b")
    assert key_a != key_b != notices.pool_key(b"s2", "uid-a")
    tokens = {notices.slot_token(k, s) for k in (key_a, key_b) for s in range(3)}
    assert len(tokens) == 6


def test_signature_checks_token_body_and_age() -> None:
    body, now = b'{"x": 1}', time.time()
    header = notices.sign("tok", int(now), body)
    assert notices.signature_problem("tok", header, body, now) is None
    assert "match" in (notices.signature_problem("other", header, body, now) or "")
    assert "match" in (notices.signature_problem("tok", header, b'{"x": 2}', now) or "")
    assert "off" in (notices.signature_problem("tok", header, body, now + 3600) or "")
    assert "timestamp" in (notices.signature_problem("tok", "v1=abc", body, now) or "")


def test_the_agent_signs_as_the_operator_checks() -> None:
    """The standalone agent keeps its own copy of the signature: the two must agree."""
    assert agent.sign("tok", 1700000000, b"body") == notices.sign("tok", 1700000000, b"body")
    assert agent.REPORT_PATH == notices.REPORT_PATH
    assert agent.SIGNATURE_HEADER == notices.SIGNATURE_HEADER


def test_user_data_alone_or_beside_the_pools_own() -> None:
    part = notices.agent_part(AGENT, "uid-a", 3, "t0k3n")
    assert part.startswith("#cloud-config")
    assert notices.with_agent(None, part) == part
    settings = notices.agent_settings(part)
    assert settings == {
        "SPOTPOOL_NOTICE_URL": AGENT.url,
        "SPOTPOOL_NOTICE_POOL": "uid-a",
        "SPOTPOOL_NOTICE_SLOT": "3",
        "SPOTPOOL_NOTICE_TOKEN": "t0k3n",
    }
    combined = notices.with_agent("#!/bin/sh\necho hi\n", part)
    assert combined == notices.with_agent("#!/bin/sh\necho hi\n", part)  # stable bytes
    kinds = [p.get_content_type() for p in email.message_from_string(combined).walk()]
    assert kinds == ["multipart/mixed", "text/x-shellscript", "text/cloud-config"]
    assert notices.agent_settings(combined) == settings
    assert "ExecStart=/usr/bin/env spotpool notice-agent" in part


def test_report_time_is_utc_plus_8() -> None:
    report = NoticeReport(
        pool_uid="u", slot=0, instance_id="ins-abc", termination_time="2026-11-24 23:05:33"
    )
    assert report.termination_utc() == datetime(2026, 11, 24, 15, 5, 33, tzinfo=UTC)


def test_stack_config_has_the_agent_only_with_an_endpoint_and_not_opted_out() -> None:
    from spotpool.localworld.engine import pool_spec

    pool = PoolIdentity(namespace="a", name="b", uid="u")
    assert StackConfig.from_spec(pool, pool_spec(1)).notice_agent is None
    on = StackConfig.from_spec(pool, pool_spec(1), notice_url="http://op:8090")
    assert on.notice_agent == NoticeAgent(url="http://op:8090", command="spotpool notice-agent")
    off = pool_spec(1, terminationNotices={"enabled": False})
    assert StackConfig.from_spec(pool, off, notice_url="http://op:8090").notice_agent is None


def _beijing(when: datetime) -> str:
    """A time as the metadata service says it (UTC+8)."""
    return (when + notices.BEIJING).strftime("%Y-%m-%d %H:%M:%S")


NOTICE_AT = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=120)


@pytest.fixture(autouse=True)
def _notice_two_minutes_ahead() -> None:
    """A notice is taken only near its receipt: each test's is two minutes after its own start
    (not the module's import, which a long suite leaves far behind)."""
    global NOTICE_AT
    NOTICE_AT = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=120)


def _report(
    world_settings_key: str,
    slot: int,
    instance: str,
    uid: str = "uid-gpu",
    nonce: str = "",
    when: str | None = None,
) -> tuple[bytes, str]:
    fields = {"poolUid": uid, "slot": slot, "instanceId": instance,
              "terminationTime": when or _beijing(NOTICE_AT)}  # fmt: skip
    if nonce:
        fields["nonce"] = nonce
    body = json.dumps(fields).encode()
    token = notices.slot_token(world_settings_key, slot, nonce)
    return body, notices.sign(token, int(time.time()), body)


def test_operator_takes_a_report_only_from_the_slots_own_instance(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    reconciler = world.reconciler
    pool = reconciler.pool(ref(pool_body()))
    pool.status = pool.status.model_copy(
        update={
            "instances": [
                Instance(instance_id="ins-aaa", slot=0),
                Instance(instance_id="ins-bbb", slot=1),
            ]
        }
    )
    key = reconciler.settings.engine.notice_key("uid-gpu")

    # slot 1's instance, with slot 1's token, naming slot 0's instance: refused
    body, signature = _report(key, 1, "ins-aaa")
    assert reconciler.receive_notice(body, signature)[0] == 409
    # slot 0's report signed with slot 1's token: refused
    body, _ = _report(key, 0, "ins-aaa")
    _, other = _report(key, 1, "ins-aaa")
    assert reconciler.receive_notice(body, other)[0] == 401
    # another operator's secret: refused
    body, forged = _report(notices.pool_key(b"guess", "uid-gpu"), 0, "ins-aaa")
    assert reconciler.receive_notice(body, forged)[0] == 401
    # a pool this operator does not serve
    body, signature = _report(reconciler.settings.engine.notice_key("uid-x"), 0, "ins-aaa", "uid-x")
    assert reconciler.receive_notice(body, signature)[0] == 404
    assert reconciler.receive_notice(b"{}", "")[0] == 400
    assert pool.noticed == {}

    body, signature = _report(key, 0, "ins-aaa")
    assert reconciler.receive_notice(body, signature)[0] == 202
    (taken,) = pool.noticed.values()
    assert (taken.slot, taken.instance_id, taken.termination_time) == (0, "ins-aaa", NOTICE_AT)
    assert pool.wake.is_set()
    assert reconciler.receive_notice(body, signature)[0] == 200  # said twice: once acted on

    pool.noticed.clear()
    pool.status = pool.status.model_copy(
        update={"surges": [Surge(slot=0, instance_id="ins-ccc", replacing="ins-aaa")]}
    )
    assert reconciler.receive_notice(body, signature)[0] == 200  # already being replaced
    body, signature = _report(key, 0, "ins-ccc")
    assert reconciler.receive_notice(body, signature)[0] == 200  # the replacement itself
    assert pool.noticed == {}
    counted = {
        result: world.metrics.registry.get_sample_value(
            "spotpool_notice_reports_total", {"result": result}
        )
        for result in NOTICE_RESULTS
    }
    assert counted == {
        "accepted": 1, "repeat": 2, "from_surge": 1, "malformed": 1, "bad_signature": 2,
        "not_served": 0, "unknown_pool": 1, "wrong_instance": 1, "stale_token": 0, "unfulfilled": 0,
        "bad_time": 0, "rate_limited": 0,
    }  # fmt: skip


def test_notice_endpoint_needs_a_reachable_address(tmp_path: Path) -> None:
    from tests.operator.fakes import settings

    assert settings(tmp_path).notice_endpoint() is None
    assert settings(tmp_path, notice_port=8090).notice_endpoint() == "http://127.0.0.1:8090"
    assert settings(tmp_path, notice_port=8090, notice_host="0.0.0.0").notice_endpoint() is None
    wide = settings(tmp_path, notice_port=8090, notice_host="0.0.0.0", notice_url="http://n:1/")
    assert wide.notice_endpoint() == "http://n:1"


def test_a_notice_starts_the_slots_replacement_in_one_engine_run(tmp_path: Path) -> None:
    world = make_world(tmp_path, notice_port=8090)
    reconciler = world.reconciler
    body = pool_body()
    run(reconciler.converge(ref(body)))
    assert world.cloud.applied["team-a.gpu"].notice_agent is not None  # agents installed
    pool = reconciler.pool(ref(body))
    first = {i.slot: i.instance_id for i in pool.status.instances}
    key = reconciler.settings.engine.notice_key("uid-gpu")
    report, signature = _report(key, 1, first[1])
    assert reconciler.receive_notice(report, signature)[0] == 202

    run(reconciler.start_surges(ref(body)))
    assert world.cloud.calls[-1] == ("start_surge", "team-a.gpu")
    status = world.cluster.last("team-a/gpu")
    (surge,) = status["surges"]
    assert surge["slot"] == 1 and surge["replacing"] == first[1]
    assert surge["instanceId"] not in first.values()
    assert surge["terminationTime"] == NOTICE_AT.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert surge["receivedTime"] and surge["startTime"]
    assert status["notices"]["total"] == 1
    assert status["phase"] == "Ready"  # the noticed instance still runs: nothing missing
    assert world.events.reasons()[-2:] == ["TerminationNotice", "Surging"]
    assert pool.noticed == {}
    assert _surges(world.metrics) == {"started": 1, "promoted": 0, "retired": 0}


def test_a_notice_whose_surge_run_fails_is_kept_and_started_on_the_next_try(
    tmp_path: Path,
) -> None:
    """A surge run that fails (here the engine; in CI the pool's shard was not held for a
    moment under load) leaves the notice with the pool: the daemon's next try starts it."""
    world, body, first = noticed_world(tmp_path)
    reconciler = world.reconciler
    pool = reconciler.pool(ref(body))
    report, signature = _report(reconciler.settings.engine.notice_key("uid-gpu"), 0, first[0])
    assert reconciler.receive_notice(report, signature)[0] == 202

    world.cloud.fail_surge = "the API server went away"
    with pytest.raises(PoolProblem):
        run(reconciler.start_surges(ref(body)))
    assert list(pool.noticed) == [0] and pool.noticed[0].instance_id == first[0]
    assert not world.cloud.surges.get("team-a.gpu")

    world.cloud.fail_surge = None
    run(reconciler.start_surges(ref(body)))
    status = world.cluster.last("team-a/gpu")
    (surge,) = status["surges"]
    assert surge["slot"] == 0 and surge["replacing"] == first[0]
    assert pool.noticed == {}
    assert status["notices"]["total"] == 1  # one notice, counted once through the retry


def test_a_surge_whose_old_instance_outlives_its_notice_is_retired(tmp_path: Path) -> None:
    world = make_world(tmp_path, notice_port=8090, notice_grace=60)
    reconciler = world.reconciler
    body = pool_body()
    run(reconciler.converge(ref(body)))
    pool = reconciler.pool(ref(body))
    first = {i.slot: i.instance_id for i in pool.status.instances}
    report, signature = _report(reconciler.settings.engine.notice_key("uid-gpu"), 0, first[0])
    reconciler.receive_notice(report, signature)
    received = datetime.now(UTC).replace(microsecond=0)
    reconciler.clock = lambda: received
    run(reconciler.start_surges(ref(body)))  # the notice says two minutes from now
    assert [s.slot for s in pool.status.surges] == [0]

    later = received + timedelta(seconds=59)  # within the grace, counted from the receipt
    reconciler.clock = lambda: later
    run(reconciler.retire_stale_surges(ref(body)))
    assert [s.slot for s in pool.status.surges] == [0]

    later = received + timedelta(seconds=61)  # still running; the notice's own time is not due
    reconciler.clock = lambda: later
    run(reconciler.retire_stale_surges(ref(body)))
    assert world.cloud.calls[-1] == ("retire_surges", "team-a.gpu")
    assert pool.status.surges == []
    assert world.cluster.last("team-a/gpu")["surges"] == []
    assert {i.slot: i.instance_id for i in pool.status.instances} == first
    assert world.events.reasons()[-1] == "NoticeUnfulfilled"
    assert _surges(world.metrics) == {"started": 1, "promoted": 0, "retired": 1}


def _surges(metrics: Metrics) -> dict[str, float | None]:
    return {
        event: metrics.registry.get_sample_value("spotpool_surges_total", {"event": event})
        for event in ("started", "promoted", "retired")
    }


# --- the onNotice command ---------------------------------------------------------------------

ON_NOTICE = AGENT.model_copy(
    update={
        "on_notice": "echo \"$SPOTPOOL_INSTANCE_ID\" > '/tmp/x y'\nexit 3",
        "on_notice_timeout": 7,
    }
)


def test_the_on_notice_command_rides_the_agents_environment_file_unquoted() -> None:
    part = notices.agent_part(ON_NOTICE, "uid-a", 3, "t0k3n")
    settings = notices.agent_settings(part)
    assert settings["SPOTPOOL_ON_NOTICE_TIMEOUT"] == "7"
    assert settings["SPOTPOOL_NOTICE_TOKEN"] == "t0k3n"  # the lines after it still parse
    read = agent.AgentSettings.from_env(settings)
    assert (read.on_notice, read.on_notice_timeout) == (ON_NOTICE.on_notice, 7.0)
    assert notices.agent_part(AGENT, "uid-a", 3, "t0k3n") == notices.agent_part(
        AGENT.model_copy(update={"on_notice": None}), "uid-a", 3, "t0k3n"
    )  # no command: the user data of before, byte for byte
    assert agent.CHECKPOINT_PATH == notices.CHECKPOINT_PATH


def test_stack_config_carries_the_on_notice_command() -> None:
    from spotpool.localworld.engine import pool_spec

    pool = PoolIdentity(namespace="a", name="b", uid="u")
    spec = pool_spec(1, terminationNotices={"onNotice": "save", "onNoticeTimeoutSeconds": 30})
    made = StackConfig.from_spec(pool, spec, notice_url="http://op:8090").notice_agent
    assert made is not None and (made.on_notice, made.on_notice_timeout) == ("save", 30)


class _Fake(BaseHTTPRequestHandler):
    """The metadata service (a notice from the start) and the operator (takes every report)."""

    reports: ClassVar[list[tuple[str, dict[str, Any], str]]] = []

    def do_GET(self) -> None:
        body = _beijing(datetime.now(UTC) + timedelta(seconds=120)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        _Fake.reports.append((self.path, json.loads(raw), self.headers[notices.SIGNATURE_HEADER]))
        self.send_response(200 if self.path == notices.CHECKPOINT_PATH else 202)  # recorded
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


def _agent_run(tmp_path: Path, command: str, timeout: float) -> list[tuple[str, dict[str, Any]]]:
    _Fake.reports = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    settings = agent.AgentSettings(
        report_url=url, token="t0k3n", pool_uid="uid-a", slot=2, metadata_url=url + "/md/",
        instance_id="ins-abc", interval=0.2, on_notice=command, on_notice_timeout=timeout,
    )  # fmt: skip
    try:
        assert agent.run(settings) == 0
    finally:
        server.shutdown()
        server.server_close()
    for _, body, signature in _Fake.reports:  # each signed with the slot's token
        raw = json.dumps(body).encode()
        assert notices.signature_problem("t0k3n", signature, raw, time.time()) is None
    return [(path, body) for path, body, _ in _Fake.reports]


def test_the_agent_runs_the_command_and_reports_its_exit_and_duration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    measured: list[agent.CommandResult] = []
    finish = agent.finish_command

    def timed(*args: Any, **kwargs: Any) -> agent.CommandResult:
        measured.append(finish(*args, **kwargs))
        return measured[-1]

    monkeypatch.setattr(agent, "finish_command", timed)
    marker = tmp_path / "marker"
    command = f'sleep 0.5; echo "$SPOTPOOL_INSTANCE_ID $SPOTPOOL_NOTICE_TOKEN" > "{marker}"'
    reports = _agent_run(tmp_path, command, 30)
    assert marker.read_text() == "ins-abc \n"  # its instance, never the token
    assert [path for path, _ in reports] == [notices.REPORT_PATH, notices.CHECKPOINT_PATH]
    result = notices.CheckpointReport.model_validate(reports[1][1])
    assert (result.slot, result.instance_id, result.exit_code, result.timed_out) == (
        2, "ins-abc", 0, False
    )  # fmt: skip
    assert result.seconds == round(measured[0].seconds, 3)  # what the agent timed (below: how)

    reports = _agent_run(tmp_path, "exit 3", 30)
    assert notices.CheckpointReport.model_validate(reports[1][1]).exit_code == 3


def test_a_command_past_its_timeout_is_killed_and_reported_so(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    reports = _agent_run(tmp_path, f'sleep 60 & echo "$! $$" > "{pids}"; sleep 60', 1)
    result = notices.CheckpointReport.model_validate(reports[1][1])
    assert result.timed_out and result.exit_code == -15
    # The agent returned with the command's whole session gone, its background child too: it
    # waited for neither minute.
    for pid in map(int, pids.read_text().split()):
        assert not _running(pid), f"process {pid} of the command outlived its timeout"


class _Clock:
    """A monotonic clock the test sets (the agent's `time` module, its other calls real)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def test_the_reported_duration_is_the_commands_time_on_the_monotonic_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock(107.25)
    monkeypatch.setattr(agent, "time", clock)
    done = subprocess.Popen(["true"])
    done.wait()
    assert agent.finish_command(done, 100.0, 30) == agent.CommandResult(0, 7.25, False)
    # Past its timeout at the first look: stopped (SIGTERM), timed out, the same clock's time.
    sleeping = subprocess.Popen(["sleep", "60"], start_new_session=True)
    clock.now = 131.5
    result = agent.finish_command(sleeping, 100.0, 30)
    assert result == agent.CommandResult(-15, 31.5, True)
    assert agent.finish_command(None, 100.0, 30) == agent.CommandResult(-1, 31.5)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _checkpoint(
    key: str, slot: int, instance: str, code: int, nonce: str = ""
) -> tuple[bytes, str]:
    fields = {"poolUid": "uid-gpu", "slot": slot, "instanceId": instance, "exitCode": code,
              "seconds": 4.25, **({"nonce": nonce} if nonce else {})}  # fmt: skip
    body = json.dumps(fields).encode()
    return body, notices.sign(notices.slot_token(key, slot, nonce), int(time.time()), body)


def test_operator_records_the_commands_result_and_posts_an_event(tmp_path: Path) -> None:
    world, body, first = noticed_world(tmp_path)
    reconciler = world.reconciler
    pool = reconciler.pool(ref(body))
    key = reconciler.settings.engine.notice_key("uid-gpu")

    async def receive(report: tuple[bytes, str]) -> int:
        code = reconciler.receive_checkpoint(*report)[0]
        if pool.checkpoints:  # what the pool's daemon does on the wake
            assert pool.wake.is_set()
            await reconciler.record_checkpoints(ref(body))
        return code

    assert run(receive(_checkpoint(key, 0, first[1], 0))) == 409  # not slot 0's instance
    assert run(receive((_checkpoint(key, 1, first[1], 0)[0], "t=1,v1=x"))) == 401
    assert run(receive(_checkpoint(notices.pool_key(b"x", "uid-gpu"), 1, first[1], 0))) == 401
    assert run(receive((b"{}", ""))) == 400
    assert pool.status.notices.checkpoints == []

    assert run(receive(_checkpoint(key, 1, first[1], 0))) == 202
    assert run(receive(_checkpoint(key, 1, first[1], 0))) == 200  # said twice: kept once
    assert run(receive(_checkpoint(key, 0, first[0], 1))) == 202
    written = world.cluster.last("team-a/gpu")["notices"]["checkpoints"]
    assert [(c["slot"], c["instanceId"], c["exitCode"], c["seconds"]) for c in written] == [
        (1, first[1], 0, 4.25), (0, first[0], 1, 4.25)
    ]  # fmt: skip
    assert all(c["time"] for c in written)
    assert world.events.reasons()[-2:] == ["CheckpointSaved", "CheckpointFailed"]
    assert "exited 1 after 4.2 s" in world.events.posted[-1][2]


def test_a_surge_carries_the_instance_it_replaces_and_keeps_it_once_promoted() -> None:
    from spotpool.engine.launches.notice_nonces import held_nonces, plan_nonces

    def instance(key: str, tags: dict[str, str]) -> dict[str, object]:
        return {
            "urn": "urn:pulumi:s::spotpool::spotpool:index:SpotPool$tencentcloud:Instance/"
            f"instance:Instance::gpu-slot-{key}",
            "type": "tencentcloud:Instance/instance:Instance",
            "id": f"ins-{key.replace('-', '')}",
            "outputs": {"tags": tags},
        }

    nonce = {notices.NONCE_TAG: "0a0a0a0a"}
    before = held_nonces({"resources": [instance("0", nonce), instance("1", nonce)]})
    made = plan_nonces(before, 2, surge=[1])  # the notice run: slot 1's surge
    assert made["1-surge@previous"] == "ins-1" and "0-surge@previous" not in made
    assert "1@previous" not in made and "0@previous" not in made
    surge_tags = {notices.NONCE_TAG: made["1-surge"], notices.PREVIOUS_TAG: "ins-1"}
    state = {"resources": [instance("0", nonce), instance("1-surge", surge_tags)]}
    promoted = plan_nonces(held_nonces(state), 2, promote=[1])
    assert promoted["1"] == made["1-surge"] and promoted["1@previous"] == "ins-1"
    state = {"resources": [instance("0", nonce), instance("1", surge_tags)]}
    assert plan_nonces(held_nonces(state), 2)["1@previous"] == "ins-1"  # kept from then on
    assert "1@previous" not in plan_nonces(held_nonces(state), 2, fresh=[1])  # gone: a new one
    # A surge made before previous ids keeps none (its user data must not change).
    old = {"resources": [instance("1", nonce), instance("1-surge", nonce)]}
    assert "1-surge@previous" not in plan_nonces(held_nonces(old), 2, surge=[1])

    part = notices.agent_part(AGENT, "uid-a", 1, "t0k3n", "0a0a0a0a", previous="ins-1")
    assert notices.agent_settings(part)["SPOTPOOL_PREVIOUS_INSTANCE_ID"] == "ins-1"
    assert f"- path: {notices.PREVIOUS_FILE}\n" in part and "\n      ins-1\nruncmd:" in part
    assert yaml.safe_load(part)["write_files"][2] == {
        "path": notices.PREVIOUS_FILE, "permissions": "0644", "content": "ins-1\n"
    }  # fmt: skip
    assert len(yaml.safe_load(notices.agent_part(AGENT, "u", 1, "t"))["write_files"]) == 2
    with pytest.raises(ValueError):
        notices.agent_part(AGENT, "uid-a", 1, "t0k3n", previous="ins-1\nX=1")


def test_a_result_taken_in_survives_the_pools_shard_slipping_away_and_back(
    tmp_path: Path,
) -> None:
    """An onNotice result answered 'recorded' while a surge run held the pool, then the shard
    lost for a moment (a Lease renewal late on a busy machine) and taken again: the result is
    still written (a fresh-clone run lost it with the pool's dropped state)."""
    world, body, first = noticed_world(tmp_path)
    reconciler = world.reconciler
    key = reconciler.settings.engine.notice_key("uid-gpu")
    assert reconciler.receive_checkpoint(*_checkpoint(key, 1, first[1], 0))[0] == 202

    reconciler.drop(["uid-gpu"])  # the shard slipped before the daemon wrote it
    pool = reconciler.pool(ref(body))  # served again: the daemon's next look
    assert pool.checkpoints
    run(reconciler.record_checkpoints(ref(body)))
    written = world.cluster.last("team-a/gpu")["notices"]["checkpoints"]
    assert [(c["slot"], c["instanceId"], c["exitCode"]) for c in written] == [(1, first[1], 0)]
    assert world.events.reasons()[-1] == "CheckpointSaved"
    run(reconciler.record_checkpoints(ref(body)))  # nothing twice
    assert len(world.cluster.last("team-a/gpu")["notices"]["checkpoints"]) == 1


def test_a_result_whose_status_write_failed_is_carried_by_the_next_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The status write of a result taken in fails (the API server unreachable for a moment):
    the result stays in the pool's status held in memory, and the next write carries it."""
    world, body, first = noticed_world(tmp_path)
    reconciler = world.reconciler
    key = reconciler.settings.engine.notice_key("uid-gpu")
    assert reconciler.receive_checkpoint(*_checkpoint(key, 1, first[1], 0))[0] == 202
    patch_status = world.cluster.patch_status

    def unreachable(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("the API server did not answer")

    monkeypatch.setattr(world.cluster, "patch_status", unreachable)
    run(reconciler.record_checkpoints(ref(body)))  # logged, not raised: the op goes on
    assert "team-a/gpu" not in world.cluster.statuses or not any(
        s.get("notices", {}).get("checkpoints") for s in world.cluster.statuses["team-a/gpu"]
    )

    monkeypatch.setattr(world.cluster, "patch_status", patch_status)
    run(reconciler.record_checkpoints(ref(body)))  # the next write, whatever it is for
    written = world.cluster.last("team-a/gpu")["notices"]["checkpoints"]
    assert [(c["slot"], c["instanceId"], c["exitCode"]) for c in written] == [(1, first[1], 0)]
    assert world.events.reasons().count("CheckpointSaved") == 1


def test_a_result_taken_in_reaches_the_status_when_the_shard_moves_for_good(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's onNotice result is taken in by one replica, whose pool's shard then moves to
    another replica for good before its daemon wrote it: the agent keeps sending until the
    pool's status holds it (the replica now holding the pool writes it and answers
    `recorded`). Before, the first replica's 202 ended the agent's reports: the result was lost."""
    world, body, first = noticed_world(tmp_path)
    first_replica = world.reconciler
    key = first_replica.settings.engine.notice_key("uid-gpu")
    monkeypatch.setattr(agent, "RETRY_SECONDS", 0.05)
    serving: dict[str, Any] = {"replica": first_replica, "body": body}
    answers: list[int] = []

    class Operators(_Fake):
        """The metadata service, and the notice endpoint of whichever replica holds the pool."""

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            code, message = 202, "replacement starting"
            if self.path == notices.CHECKPOINT_PATH:
                code, message = self._checkpoint(raw, self.headers[notices.SIGNATURE_HEADER])
            answer = json.dumps({"message": message}).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def _checkpoint(self, raw: bytes, signature: str) -> tuple[int, str]:
            replica, pool_body = serving["replica"], serving["body"]
            code, message = replica.receive_checkpoint(raw, signature)
            answers.append(code)
            if replica is first_replica:  # the shard moves before its daemon wrote it
                first_replica.drop(["uid-gpu"])
                stored = {**body, "status": world.cluster.last("team-a/gpu")}
                serving["replica"] = Reconciler(
                    first_replica.settings, world.cluster, world.events, Metrics(),
                    first_replica.engine_factory,
                )  # fmt: skip
                serving["body"] = stored
            elif replica.pool(ref(pool_body)).checkpoints:  # the new holder's daemon, woken
                run(replica.record_checkpoints(ref(pool_body)))
            return code, message

    server = ThreadingHTTPServer(("127.0.0.1", 0), Operators)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    settings = agent.AgentSettings(
        report_url=url, token=notices.slot_token(key, 1, ""), pool_uid="uid-gpu", slot=1,
        metadata_url=url + "/md/", instance_id=first[1], interval=0.2, on_notice="exit 0",
        on_notice_timeout=30,
    )  # fmt: skip
    try:
        assert agent.run(settings) == 0
    finally:
        server.shutdown()
        server.server_close()
    assert answers[0] == 202  # taken in by the first replica, never written by it
    written = world.cluster.last("team-a/gpu").get("notices", {}).get("checkpoints", [])
    assert [(c["slot"], c["instanceId"], c["exitCode"]) for c in written] == [(1, first[1], 0)]
    assert answers[-1] == 200 and world.events.reasons()[-1] == "CheckpointSaved"
