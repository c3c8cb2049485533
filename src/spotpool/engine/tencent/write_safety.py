"""What makes a Pulumi run's cloud calls safe to lose and to repeat, at the API proxy.

The provider we build (terraform-provider-tencentcloud v1.81.20) sends `RunInstances` with no
`ClientToken`: sent twice, it makes two paid instances. So before the proxy signs a create it:

- adds a `ClientToken` where the provider sent none, derived from the run and the request
  (`with_client_token`): the provider's own re-send of the same create, in the same run, gets
  the same token, and the cloud answers it with the same instance;
- tells the run's create journal (`CreateJournal`, dead_runs.py keeps it in the backend) the
  slot and token before the request leaves, and the instance ids once the cloud answered, so
  a create whose answer was lost, or whose run failed or was killed, is found again by the
  next operation at once — never left for the orphan grace.

How a call may be sent again (`kind`): a read at will; a create only with its token; a write
that sets a value (tags, a name) like a create; any other write (TerminateInstances) only when
it provably never left (the connection failed before the request was written).
"""

import hashlib
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from spotpool.api.stackconfig import TAG_POOL_UID, TAG_SLOT

# The creates a pool's stack makes (the provider's other creates, disks or EIPs, are not used
# by the program; they would get the same treatment here).
CREATE_ACTIONS = frozenset({"RunInstances"})
TOKEN_PREFIX = "spotpool-run-"  # the fast path's own are spotpool-<48 hex>
# A refusal the provider does not retry (not in its retryable codes): the run fails at once.
TOO_MANY_CODE = "LimitExceeded.SpotpoolOutstandingCreates"


class Kind(StrEnum):
    READ = "read"  # Describe*, Inquiry*, Get*: sent again at will
    CREATE = "create"  # carries its ClientToken: sent again with the same one
    IDEMPOTENT = "idempotent"  # sets a value: the same again is the same (tags, a name)
    WRITE = "write"  # sent again only when it provably never left


# Writes that set what they name to a given value: sent twice, the cloud ends the same (a
# terminated instance is terminated once: the repeat of one whose answer was lost finds it
# terminating, or gone — `repeat_settled`).
IDEMPOTENT_ACTIONS = frozenset(
    {"ModifyResourceTags", "TagResources", "UnTagResources", "ModifyInstancesAttribute",
     "TerminateInstances"}
)  # fmt: skip


def kind_of(action: str) -> Kind:
    if action in CREATE_ACTIONS:
        return Kind.CREATE
    if action in IDEMPOTENT_ACTIONS:
        return Kind.IDEMPOTENT
    if action.startswith(("Describe", "Inquiry", "Get")):
        return Kind.READ
    return Kind.WRITE


@dataclass
class CreateRecord:
    """One create a run is sending: its pool and slot (from its tags), its token, and the
    instances the cloud answered (none until it did)."""

    token: str
    pool_uid: str | None
    slot: int | None
    instance_ids: list[str] = field(default_factory=list)


class CreateJournal:
    """Where a stack's creates are written down before they are sent (dead_runs.py)."""

    def record(self, create: CreateRecord) -> None:
        """Before the send; raising refuses the create (nothing is sent)."""
        raise NotImplementedError

    def answered(self, create: CreateRecord) -> None:
        """The cloud answered with `create.instance_ids`."""
        raise NotImplementedError


class OutstandingCreates(Exception):
    """A slot has too many creates not yet found again: refuse another one."""


_journals: dict[str, Callable[[], CreateJournal]] = {}
_journals_guard = threading.Lock()
STACK_VARIABLE = "SPOTPOOL_RUN_STACK"  # names the run's stack to the proxy; never sent on


def register_journal(stack: str, journal: Callable[[], CreateJournal]) -> None:
    """The journal of `stack`'s runs (stack_workspace.pulumi_env registers it)."""
    with _journals_guard:
        _journals[stack] = journal


def journal_of(stack: str | None) -> CreateJournal | None:
    with _journals_guard:
        make = _journals.get(stack or "")
    return make() if make is not None else None


def with_client_token(body: bytes, run_key: str) -> tuple[bytes, str | None]:
    """The create's body with a ClientToken (the one it carries, else one derived from the
    run and the request, the same for the same request of the same run), and that token;
    the body unchanged and None when it is not a JSON object."""
    try:
        params = json.loads(body or b"{}")
    except ValueError:
        return body, None
    if not isinstance(params, dict):
        return body, None
    given = params.get("ClientToken")
    if isinstance(given, str) and given:
        return body, given
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(f"{run_key}\0{canonical}".encode()).hexdigest()
    token = TOKEN_PREFIX + digest[:40]  # 53 ASCII characters: the API takes 64
    params["ClientToken"] = token
    return json.dumps(params, separators=(",", ":")).encode(), token


def create_record(body: bytes, token: str) -> CreateRecord:
    """The pool and slot a RunInstances names in its instance tags."""
    tags = _instance_tags(_json(body))
    slot = tags.get(TAG_SLOT, "")
    return CreateRecord(
        token=token, pool_uid=tags.get(TAG_POOL_UID), slot=int(slot) if slot.isdigit() else None
    )


def _instance_tags(params: dict[str, Any]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for spec in params.get("TagSpecification") or []:
        if isinstance(spec, dict) and spec.get("ResourceType") == "instance":
            for tag in spec.get("Tags") or []:
                if isinstance(tag, dict):
                    tags[str(tag.get("Key"))] = str(tag.get("Value"))
    return tags


def _json(data: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(data or b"{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _response(reply: bytes) -> dict[str, Any]:
    found = _json(reply).get("Response")
    return found if isinstance(found, dict) else {}


def error_code(reply: bytes) -> str | None:
    """The API error code of an answer, or None when it succeeded (or is no API answer)."""
    error = _response(reply).get("Error")
    return str(error.get("Code")) if isinstance(error, dict) else None


def retry_repeatable(status: int, reply: bytes) -> bool:
    """A read, a create (with its token) or an idempotent write answered so may be sent again:
    a 5xx, the cloud's own InternalError (the same token gets the same instance, if the first
    one made it; the same tags are the same tags), or a throttling (nothing was done)."""
    code = error_code(reply) or ""
    family = code.split(".", 1)[0]
    return status >= 500 or family in ("InternalError", "RequestLimitExceeded")


def repeat_settled(action: str, reply: bytes) -> bytes:
    """The answer to give for a repeat of a call whose earlier send's answer was lost: a
    TerminateInstances repeat told the instances are gone (`InvalidInstanceId.NotFound`) says
    the earlier one took effect — the caller asked for exactly that."""
    response = _response(reply)
    if action != "TerminateInstances" or error_code(reply) != "InvalidInstanceId.NotFound":
        return reply
    return json.dumps({"Response": {"RequestId": response.get("RequestId", "")}}).encode()


def created_ids(reply: bytes) -> list[str]:
    ids = _response(reply).get("InstanceIdSet") or []
    return [str(i) for i in ids if isinstance(i, str)]


def asked_ids(body: bytes) -> list[str]:
    """The InstanceIds a DescribeInstances asks for (none: it lists by filter)."""
    ids = _json(body).get("InstanceIds") or []
    return [str(i) for i in ids if isinstance(i, str)]


def listed_ids(reply: bytes) -> list[str]:
    return [
        str(item.get("InstanceId"))
        for item in _response(reply).get("InstanceSet") or []
        if isinstance(item, dict)
    ]


GONE = frozenset({"TERMINATING", "SHUTDOWN", "LAUNCH_FAILED"})


def without_stale(reply: bytes, terminated: Callable[[str], bool]) -> bytes:
    """A DescribeInstances answer less the instances this process terminated a moment ago
    that a lagging listing still shows as live: they are gone."""
    response = _response(reply)
    items = response.get("InstanceSet")
    if not isinstance(items, list):
        return reply
    kept = [
        item
        for item in items
        if not (
            isinstance(item, dict)
            and item.get("InstanceState") not in GONE
            and terminated(str(item.get("InstanceId")))
        )
    ]
    if len(kept) == len(items):
        return reply
    response["InstanceSet"] = kept
    if isinstance(response.get("TotalCount"), int):
        response["TotalCount"] = max(0, response["TotalCount"] - (len(items) - len(kept)))
    return json.dumps({"Response": response}).encode()


def terminated_ids(action: str, body: bytes) -> Iterable[str]:
    if action != "TerminateInstances":
        return []
    return asked_ids(body)
