"""The notice agent: on a spot instance, poll the metadata service's `spot/termination-time`
(404 until the cloud schedules a reclaim, then a UTC+8 `YYYY-MM-DD HH:MM:SS`) and report it
once to the operator, signed with this slot's token; then exit. With an onNotice command
(`SPOTPOOL_ON_NOTICE_B64`), the agent starts it the moment the notice comes, reports the notice
while it runs, and reports its exit code and duration when it ends (a second signed report),
sent again until the operator answers that the pool's status holds it (`recorded`, 200).

Standard library only, so this one file also runs on its own (`python3 agent.py`, settings in
the environment) on an image that has Python but not the spotpool package. The report's wire
format is `spotpool.api.notices` (a test keeps the two in step).
"""

import base64
import hashlib
import hmac
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

log = logging.getLogger("spotpool.notice-agent")
METADATA_URL = "http://metadata.tencentyun.com/latest/meta-data/"
REPORT_PATH = "/v1/notices"
CHECKPOINT_PATH = "/v1/checkpoints"
# Seconds to keep sending the command's result until the operator answers `recorded` (the
# instance goes at its termination time anyway): long enough for the pool's shard to move to
# another replica (a Lease duration) and its new holder to write it.
CHECKPOINT_GIVE_UP = 180.0
# The operator's answer once a status holding the result is written; 202: taken in, not yet
# written (the replica may lose the pool before it writes it): sent again.
RECORDED = 200
TAKEN_NOT_WRITTEN = 202
KILL_GRACE = 5.0  # seconds between SIGTERM and SIGKILL of a command past its timeout
SIGNATURE_HEADER = "X-Spotpool-Signature"
RETRY_SECONDS = 2.0
# 404: maybe a replica that does not serve the pool yet; 408, 429: busy (rate-limited) now.
RETRIED = (404, 408, 429)


@dataclass(frozen=True)
class AgentSettings:
    report_url: str  # the operator's notice endpoint (REPORT_PATH is appended)
    token: str
    pool_uid: str
    slot: int
    nonce: str = ""  # this instance's generation (its token is bound to it)
    metadata_url: str = METADATA_URL
    instance_id: str | None = None  # None: ask the metadata service
    interval: float = 5.0
    give_up_after: float = 600.0  # keep retrying a report at most this long
    on_notice: str = ""  # run by /bin/sh -c when the notice comes ("": nothing)
    on_notice_timeout: float = 90.0

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "AgentSettings":
        """From SPOTPOOL_NOTICE_* / SPOTPOOL_METADATA_URL / SPOTPOOL_INSTANCE_ID (the unit's
        environment file); a missing one is named in the error."""
        env = dict(os.environ if env is None else env)
        missing = [
            key
            for key in ("SPOTPOOL_NOTICE_URL", "SPOTPOOL_NOTICE_TOKEN", "SPOTPOOL_NOTICE_POOL",
                        "SPOTPOOL_NOTICE_SLOT")
            if not env.get(key)
        ]  # fmt: skip
        if missing:
            raise ValueError(f"set {', '.join(missing)} (the pool's user data writes them)")
        return cls(
            report_url=env["SPOTPOOL_NOTICE_URL"],
            token=env["SPOTPOOL_NOTICE_TOKEN"],
            pool_uid=env["SPOTPOOL_NOTICE_POOL"],
            slot=int(env["SPOTPOOL_NOTICE_SLOT"]),
            nonce=env.get("SPOTPOOL_NOTICE_NONCE") or "",
            metadata_url=env.get("SPOTPOOL_METADATA_URL") or METADATA_URL,
            instance_id=env.get("SPOTPOOL_INSTANCE_ID") or None,
            interval=float(env.get("SPOTPOOL_NOTICE_INTERVAL") or 5.0),
            on_notice=_command(env),
            on_notice_timeout=float(env.get("SPOTPOOL_ON_NOTICE_TIMEOUT") or 90.0),
        )


def _command(env: dict[str, str]) -> str:
    """The onNotice command: base64 as the user data writes it, or plain (run by hand)."""
    if env.get("SPOTPOOL_ON_NOTICE_B64"):
        return base64.b64decode(env["SPOTPOOL_ON_NOTICE_B64"], validate=True).decode()
    return env.get("SPOTPOOL_ON_NOTICE") or ""


def sign(token: str, timestamp: int, body: bytes) -> str:
    """HMAC-SHA256 of `<timestamp>.<body>` with the slot's token (the token never travels)."""
    mac = hmac.new(token.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def _get(url: str, timeout: float = 2.0) -> str | None:
    """The body of a metadata path, or None when it answers 404."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return str(reply.read().decode().strip())
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def _metadata(settings: AgentSettings, path: str) -> str | None:
    return _get(settings.metadata_url.rstrip("/") + "/" + path)


def termination_time(settings: AgentSettings) -> str | None:
    return _metadata(settings, "spot/termination-time")


def report(settings: AgentSettings, instance_id: str, when: str) -> tuple[int, str]:
    """Send the notice once; the operator's HTTP status and message."""
    return _post(settings, REPORT_PATH, instance_id, {"terminationTime": when})


def report_checkpoint(
    settings: AgentSettings, instance_id: str, result: "CommandResult"
) -> tuple[int, str]:
    """Send the onNotice command's result once; the operator's HTTP status and message."""
    fields = {
        "exitCode": result.exit_code,
        "seconds": round(result.seconds, 3),
        "timedOut": result.timed_out,
    }
    return _post(settings, CHECKPOINT_PATH, instance_id, fields)


def _post(
    settings: AgentSettings, path: str, instance_id: str, extra: Mapping[str, object]
) -> tuple[int, str]:
    fields: dict[str, object] = {
        "poolUid": settings.pool_uid,
        "slot": settings.slot,
        "instanceId": instance_id,
        **extra,
    }
    if settings.nonce:
        fields["nonce"] = settings.nonce
    body = json.dumps(fields).encode()
    request = urllib.request.Request(
        settings.report_url.rstrip("/") + path,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(settings.token, int(time.time()), body),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, json.load(reply).get("message", "")
    except urllib.error.HTTPError as error:
        try:
            message = json.load(error).get("message", "")
        except ValueError:
            message = error.reason
        return error.code, str(message)


@dataclass(frozen=True)
class CommandResult:
    exit_code: int  # -N: killed by signal N; -1 also when it could not be started
    seconds: float
    timed_out: bool = False


def start_command(
    settings: AgentSettings, instance_id: str, when: str
) -> subprocess.Popen[bytes] | None:
    """Start the onNotice command in a session of its own (so a timeout kills all it started),
    with the instance id and termination time in its environment and without the token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTPOOL_NOTICE_TOKEN")}
    env.pop("SPOTPOOL_ON_NOTICE_B64", None)
    env.update(SPOTPOOL_INSTANCE_ID=instance_id, SPOTPOOL_TERMINATION_TIME=when)
    try:
        return subprocess.Popen(
            ["/bin/sh", "-c", settings.on_notice],
            env=env, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    except OSError as error:
        log.error("could not start the onNotice command: %s", error)
        return None


def seconds_until(when: str, now: float | None = None) -> float:
    """Seconds from now to a UTC+8 termination time."""
    local = datetime.strptime(when, "%Y-%m-%d %H:%M:%S")
    at = (local - timedelta(hours=8)).replace(tzinfo=UTC).timestamp()
    return at - (time.time() if now is None else now)


def finish_command(
    process: subprocess.Popen[bytes] | None, started: float, timeout: float
) -> CommandResult:
    """Wait for the command until `timeout` seconds after `started` (monotonic); past it,
    SIGTERM its session, then SIGKILL after KILL_GRACE."""
    if process is None:
        return CommandResult(-1, time.monotonic() - started)
    timed_out = False
    try:
        process.wait(timeout=max(0.0, started + timeout - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
        log.error("the onNotice command ran past %.0f s: stopping it", timeout)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(timeout=KILL_GRACE)
                break
            except subprocess.TimeoutExpired:
                continue
        process.wait()
    return CommandResult(process.returncode, time.monotonic() - started, timed_out)


def _deliver(send: "Sender", give_up_after: float, what: str, again: tuple[int, ...] = ()) -> int:
    """Send until the operator takes it (0), refuses it for good (2) or time is up (1).
    `again`: answers of success that still ask for the report again (not yet written)."""
    deadline = time.monotonic() + give_up_after
    while True:
        try:
            code, message = send()
        except OSError as error:
            code, message = 0, f"operator not reachable ({error})"
        if 200 <= code < 300 and code not in again:
            log.info("%s reported: %s", what, message)
            return 0
        if 400 <= code < 500 and code not in RETRIED:
            log.error("the operator refused the %s report: %d %s", what, code, message)
            return 2
        if time.monotonic() > deadline:
            log.error("gave up reporting the %s: %s", what, message)
            return 1
        if code in again:
            log.info("%s taken, not yet recorded (%s); sending it again", what, message)
        else:
            log.warning("%s report not taken (%s %s); retrying", what, code or "-", message)
        time.sleep(RETRY_SECONDS)


def run(settings: AgentSettings, sleep: float | None = None) -> int:
    """Poll until a notice comes, report it, exit 0; exit 2 when the operator refuses it for
    good (a wrong token, slot or time: retrying cannot help).

    The onNotice command starts before the report, and they run at once: the checkpoint gets
    all of the two minutes, and the replacement starts while it runs (neither needs the other;
    a report the operator is slow to take must not eat the command's time)."""
    instance_id = settings.instance_id
    while instance_id is None:
        try:
            instance_id = _metadata(settings, "instance-id")
        except OSError as error:
            log.warning("metadata service not answering (%s); retrying", error)
        if instance_id is None:
            time.sleep(settings.interval)
    log.info("watching %s for a termination notice of %s", settings.metadata_url, instance_id)
    while True:
        try:
            when = termination_time(settings)
        except OSError as error:
            log.warning("metadata service not answering (%s)", error)
            when = None
        if when:
            break
        time.sleep(settings.interval if sleep is None else sleep)
    log.warning("termination notice: the cloud takes %s at %s (UTC+8)", instance_id, when)
    started = time.monotonic()
    process = start_command(settings, instance_id, when) if settings.on_notice else None
    code = _deliver(lambda: report(settings, instance_id, when), settings.give_up_after, "notice")
    if settings.on_notice:
        try:  # stopped at its timeout, and at the termination time at the latest
            left = seconds_until(when)
        except ValueError:
            left = settings.on_notice_timeout
        result = finish_command(process, started, min(settings.on_notice_timeout, max(left, 1.0)))
        log.info("the onNotice command ended: exit %d in %.1f s", result.exit_code, result.seconds)
        _deliver(
            lambda: report_checkpoint(settings, instance_id, result),
            CHECKPOINT_GIVE_UP,
            "onNotice result",
            again=(TAKEN_NOT_WRITTEN,),  # until the pool's status holds it
        )
    return code


Sender = Callable[[], tuple[int, str]]


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        settings = AgentSettings.from_env()
    except ValueError as error:
        log.error("%s", error)
        return 2
    return run(settings)


if __name__ == "__main__":
    sys.exit(main())
