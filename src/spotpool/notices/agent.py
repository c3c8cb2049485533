"""The notice agent: on a spot instance, poll the metadata service's `spot/termination-time`
(404 until the cloud schedules a reclaim, then a UTC+8 `YYYY-MM-DD HH:MM:SS`) and report it
once to the operator, signed with this slot's token; then exit.

Standard library only, so this one file also runs on its own (`python3 agent.py`, settings in
the environment) on an image that has Python but not the spotpool package. The report's wire
format is `spotpool.api.notices` (a test keeps the two in step).
"""

import hashlib
import hmac
import json
import logging
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

log = logging.getLogger("spotpool.notice-agent")
METADATA_URL = "http://metadata.tencentyun.com/latest/meta-data/"
REPORT_PATH = "/v1/notices"
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
        )


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
    fields: dict[str, object] = {
        "poolUid": settings.pool_uid,
        "slot": settings.slot,
        "instanceId": instance_id,
        "terminationTime": when,
    }
    if settings.nonce:
        fields["nonce"] = settings.nonce
    body = json.dumps(fields).encode()
    request = urllib.request.Request(
        settings.report_url.rstrip("/") + REPORT_PATH,
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


def run(settings: AgentSettings, sleep: float | None = None) -> int:
    """Poll until a notice comes, report it, exit 0; exit 2 when the operator refuses it for
    good (a wrong token, slot or time: retrying cannot help)."""
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
    deadline = time.monotonic() + settings.give_up_after
    while True:
        try:
            code, message = report(settings, instance_id, when)
        except OSError as error:
            code, message = 0, f"operator not reachable ({error})"
        if 200 <= code < 300:
            log.info("reported: %s", message)
            return 0
        if 400 <= code < 500 and code not in RETRIED:
            log.error("the operator refused the report: %d %s", code, message)
            return 2
        if time.monotonic() > deadline:
            log.error("gave up reporting: %s", message)
            return 1
        log.warning("report not taken (%s %s); retrying", code or "-", message)
        time.sleep(RETRY_SECONDS)


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
