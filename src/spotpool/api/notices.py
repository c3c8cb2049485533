"""Spot termination notices: the rules shared by the agent on an instance, the stack program
that installs it, and the operator that receives its reports. Pure: no I/O.

Trust: every instance of every pool has its own token, `HMAC(pool key, slot/nonce)`, where the
pool key is `HMAC(operator secret, pool uid)` and the nonce is drawn afresh for every create of
the slot's instance (its generation). The program renders the token into that instance's user
data (a Pulumi secret), so an instance holds the token of its own slot and generation and
nothing else: the token of an instance the slot had before is worthless for its successor. A
report is signed with the token (the token itself never travels), carries a timestamp (a stale
one is refused), and names the pool, the slot, the nonce and the instance; the operator accepts
it only when the signature is that slot's, the nonce and the instance are the ones its status
lists in that slot, and the termination time lies within minutes of the report's receipt. So an
instance can only ever say "I am being reclaimed soon" about itself. See docs/notices.md.
"""

import base64
import hashlib
import hmac
import re
from datetime import UTC, datetime, timedelta

from pydantic import Field, field_validator

from spotpool.api.spec import Model

# `<pool>-slot-<i>-surge`: the slot's replacement, made on a notice while its instance still
# runs; when the cloud takes that instance, the surge instance becomes the slot's.
SURGE_SUFFIX = "-surge"
AGENT_UNIT = "spotpool-notice-agent.service"
AGENT_ENV_FILE = "/etc/spotpool/notice-agent.env"
REPORT_PATH = "/v1/notices"
CHECKPOINT_PATH = "/v1/checkpoints"  # the onNotice command's result, signed the same way
SIGNATURE_HEADER = "X-Spotpool-Signature"
MAX_CLOCK_SKEW = 300.0  # seconds a report's timestamp may be off the operator's clock
# The cloud tells two minutes ahead: a termination time further out than this from the report's
# receipt, or longer ago than NOTICE_LATE, is no notice the cloud gave (or too late to act on).
NOTICE_AHEAD = 600.0
NOTICE_LATE = 60.0
NONCE_TAG = "spotpool-notice-nonce"  # the instance's generation, on the instance (not secret)
# On a surge instance (and on it once promoted): the slot's instance it replaced, so a job can
# resume from that one's checkpoint. Also SPOTPOOL_PREVIOUS_INSTANCE_ID in its agent's settings.
PREVIOUS_TAG = "spotpool-previous-instance"
PREVIOUS_FILE = "/etc/spotpool/previous-instance-id"
NONCE_PATTERN = r"^[0-9a-f]{8,64}$"
BEIJING = timedelta(hours=8)  # the metadata service answers in UTC+8
_BOUNDARY = "==spotpool-notice-agent-7f3a9c=="  # fixed: the same inputs render the same user data


class NoticeAgent(Model):
    """Where a pool's agents report, and how they are started (the operator's settings)."""

    url: str = Field(description="The operator's notice endpoint as the instances reach it.")
    command: str = Field(description="What the systemd unit runs.")
    on_notice: str | None = Field(None, description="Run by `/bin/sh -c` on a notice.")
    on_notice_timeout: int = Field(90, description="Seconds the onNotice command may run.")


class NoticeReport(Model):
    """What an agent says: this instance, in this slot of this pool, goes at this time."""

    pool_uid: str = Field(min_length=1, max_length=64)
    slot: int = Field(ge=0)
    instance_id: str = Field(pattern=r"^ins-[0-9a-z]+$", max_length=64)
    termination_time: str = Field(
        pattern=r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$",
        description="As the metadata service says it: UTC+8, YYYY-MM-DD HH:MM:SS.",
    )
    nonce: str = Field(
        "",
        max_length=64,
        description="The instance's generation, as its user data gives it (empty: an instance "
        "made before generations, whose token is the slot's alone).",
    )

    @field_validator("termination_time")
    @classmethod
    def _a_real_time(cls, value: str) -> str:
        datetime.strptime(value, "%Y-%m-%d %H:%M:%S")  # 2026-02-30: a ValueError, so a 400
        return value

    @field_validator("nonce")
    @classmethod
    def _hex(cls, value: str) -> str:
        if value and not re.fullmatch(NONCE_PATTERN, value):
            raise ValueError("a nonce is 8 to 64 lowercase hex digits")
        return value

    def termination_utc(self) -> datetime:
        local = datetime.strptime(self.termination_time, "%Y-%m-%d %H:%M:%S")
        return (local - BEIJING).replace(tzinfo=UTC)


class CheckpointReport(Model):
    """What an agent says after the onNotice command ran: its exit code and duration (-1: it
    could not be started; -9 and such: killed by that signal, e.g. at its timeout)."""

    pool_uid: str = Field(min_length=1, max_length=64)
    slot: int = Field(ge=0)
    instance_id: str = Field(pattern=r"^ins-[0-9a-z]+$", max_length=64)
    nonce: str = Field("", max_length=64)
    exit_code: int = Field(ge=-64, le=255)
    seconds: float = Field(ge=0.0, le=3600.0)
    timed_out: bool = False

    @field_validator("nonce")
    @classmethod
    def _hex(cls, value: str) -> str:
        if value and not re.fullmatch(NONCE_PATTERN, value):
            raise ValueError("a nonce is 8 to 64 lowercase hex digits")
        return value


def time_problem(termination: datetime, received: datetime) -> str | None:
    """Why a report's termination time is no notice the cloud gave just now (it gives two
    minutes), or None: at most NOTICE_AHEAD after its receipt, at most NOTICE_LATE before."""
    ahead = (termination - received).total_seconds()
    if ahead > NOTICE_AHEAD:
        return (
            f"the termination time is {ahead:.0f} s ahead; the cloud gives {NOTICE_AHEAD:.0f} s "
            "at most"
        )
    if ahead < -NOTICE_LATE:
        return f"the termination time passed {-ahead:.0f} s ago: too late to replace ahead"
    return None


def pool_key(secret: bytes, pool_uid: str) -> str:
    """The pool's key: what its stack holds (as a secret), never the operator's secret."""
    return hmac.new(secret, f"spotpool-notices/v1/pool/{pool_uid}".encode(), "sha256").hexdigest()


def slot_token(key: str, slot: int, nonce: str = "") -> str:
    """The token of one slot's instance of one generation (`nonce`, drawn for each create):
    what that instance holds in its user data. Without a nonce, the slot's alone (instances
    made before generations)."""
    message = f"slot/{slot}/{nonce}" if nonce else f"slot/{slot}"
    return hmac.new(key.encode(), message.encode(), "sha256").hexdigest()


def sign(token: str, timestamp: int, body: bytes) -> str:
    """The signature header's value for `body` sent at `timestamp` (Unix seconds)."""
    mac = hmac.new(token.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def signature_problem(token: str, header: str, body: bytes, now: float) -> str | None:
    """Why the signature header does not prove `body` came from the holder of `token` just
    now, or None when it does."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields.get("t", ""))
    except ValueError:
        return "the signature has no timestamp"
    if abs(now - timestamp) > MAX_CLOCK_SKEW:
        return f"the report is {abs(now - timestamp):.0f} s off the operator's clock"
    expected = sign(token, timestamp, body)
    if not hmac.compare_digest(expected, f"t={timestamp},v1={fields.get('v1', '')}"):
        return "the signature does not match this slot's token"
    return None


def agent_part(
    agent: NoticeAgent, uid: str, slot: int, token: str, nonce: str = "", previous: str = ""
) -> str:
    """cloud-config that installs the agent as a systemd unit (settings in a root-only file);
    `previous`: the instance a surge instance replaces (SPOTPOOL_PREVIOUS_INSTANCE_ID)."""
    lines = [
        f"SPOTPOOL_NOTICE_URL={agent.url}",
        f"SPOTPOOL_NOTICE_POOL={uid}",
        f"SPOTPOOL_NOTICE_SLOT={slot}",
        *([f"SPOTPOOL_NOTICE_NONCE={nonce}"] if nonce else []),
        *on_notice_lines(agent),
        *([f"SPOTPOOL_PREVIOUS_INSTANCE_ID={previous}"] if previous else []),
        f"SPOTPOOL_NOTICE_TOKEN={token}",
    ]
    if previous and not re.fullmatch(r"ins-[0-9a-z]+", previous):
        raise ValueError(f"not an instance id: {previous!r}")
    env = "\n".join(f"      {line}" for line in lines)
    return f"""#cloud-config
write_files:
  - path: {AGENT_ENV_FILE}
    permissions: "0600"
    owner: root:root
    content: |
{env}
  - path: /etc/systemd/system/{AGENT_UNIT}
    permissions: "0644"
    content: |
      [Unit]
      Description=Spotpool spot termination notice agent
      Wants=network-online.target
      After=network-online.target
      [Service]
      EnvironmentFile={AGENT_ENV_FILE}
      ExecStart=/usr/bin/env {agent.command}
      DynamicUser=yes
      Restart=on-failure
      RestartSec=5
      [Install]
      WantedBy=multi-user.target
{_previous_file(previous)}runcmd:
  - [systemctl, daemon-reload]
  - [systemctl, enable, --now, {AGENT_UNIT}]
"""


def _previous_file(previous: str) -> str:
    """A surge instance's previous instance, readable by any user (a job resuming from it);
    nothing for any other instance (its user data stays what it was)."""
    if not previous:
        return ""
    return f'  - path: {PREVIOUS_FILE}\n    permissions: "0644"\n    content: |\n      {previous}\n'


def on_notice_lines(agent: NoticeAgent) -> list[str]:
    """The onNotice command as the unit's environment file holds it: base64, so no quoting of
    systemd's or YAML's can change it (the agent decodes it)."""
    if not agent.on_notice:
        return []
    command = base64.b64encode(agent.on_notice.encode()).decode()
    return [
        f"SPOTPOOL_ON_NOTICE_B64={command}",
        f"SPOTPOOL_ON_NOTICE_TIMEOUT={agent.on_notice_timeout}",
    ]


def with_agent(user_data: str | None, agent: str) -> str:
    """The pool's own user data and the agent's part, as one cloud-init user data: the agent's
    part alone when the pool has none, else a MIME multipart holding both (cloud-init runs
    each part by its type). Written out by hand: the same inputs, the same bytes."""
    if not user_data:
        return agent
    parts = "".join(
        f'--{_BOUNDARY}\nContent-Type: text/{_subtype(text)}; charset="utf-8"\n'
        f"MIME-Version: 1.0\nContent-Transfer-Encoding: 8bit\n\n{text.rstrip(chr(10))}\n"
        for text in (user_data, agent)
    )
    return (
        f'Content-Type: multipart/mixed; boundary="{_BOUNDARY}"\nMIME-Version: 1.0\n\n'
        f"{parts}--{_BOUNDARY}--\n"
    )


def _subtype(text: str) -> str:
    """cloud-init's part types by first line, as it guesses them for plain user data."""
    for prefix, subtype in (
        ("#cloud-config", "cloud-config"),
        ("#!", "x-shellscript"),
        ("#cloud-boothook", "cloud-boothook"),
        ("#include", "x-include-url"),
    ):
        if text.startswith(prefix):
            return subtype
    return "plain"


def agent_settings(user_data: str) -> dict[str, str]:
    """The agent's settings as rendered into user data (what the unit's environment file
    holds): how a test world boots an emulated instance the way cloud-init would."""
    marker = f"path: {AGENT_ENV_FILE}"
    if marker not in user_data:
        return {}
    lines = user_data.split(marker, 1)[1].split("content: |", 1)[1].splitlines()[1:]
    settings = {}
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if not sep or not key.startswith("SPOTPOOL_"):
            break
        settings[key] = value
    return settings
