"""A pool's status written under its shard Lease's fencing token.

A replica whose connection to the API server stalls can have a status patch in flight when
its Lease runs out; the request may reach the server after the shard's new holder wrote a newer
status. So the status carries its writer (`status.writer`: the shard Lease, the Lease's uid and
transition count when the writer took it, the holder) and every write is one JSON patch that
first tests the writer it expects to find: the API server applies the test and the write
atomically, so a late request from an earlier writer fails (422) instead of overwriting.

On a failed test the object is read again: a writer of the same Lease with a higher token is
newer (this replica's write is dropped, `StaleWrite`); anything else (the first write after a
takeover, a status written before writers were recorded) is written again, conditional on the
object's resourceVersion, while this replica still serves the pool.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kubernetes

from spotpool.api.spec import GROUP, PLURAL, VERSION

Writer = dict[str, Any]  # status.writer as stored: lease, leaseUid, token, holder
ATTEMPTS = 3
TIMEOUT = 30


class StaleWrite(Exception):
    """A newer holder of the pool's shard wrote its status: this replica's write is dropped."""

    def __init__(self, seen: Writer | None, why: str) -> None:
        super().__init__(why)
        self.seen = seen


@dataclass(frozen=True)
class Fence:
    """A status write's condition: written as `writer` over `expected` (None: a new pool's first
    status) or over an older holder's write while `serving()` holds."""

    writer: Writer
    expected: Writer | None = None
    serving: Callable[[], bool] = lambda: True


def newer(seen: Writer | None, mine: Writer) -> bool:
    """`seen` is a later holder of the same Lease (same incarnation) than `mine`."""
    return (
        seen is not None
        and seen.get("lease") == mine["lease"]
        and seen.get("leaseUid") == mine["leaseUid"]
        and int(seen.get("token", -1)) > int(mine["token"])
    )


def present(value: Any) -> Any:
    """The value without null members: a merge patch's "remove" is "absent" in a whole status."""
    if isinstance(value, dict):
        return {key: present(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [present(item) for item in value]
    return value


def write(api: Any, namespace: str, name: str, status: dict[str, Any], fence: Fence) -> Writer:
    """Write `status` as the fence's writer if the stored writer is the one it expects; returns
    the writer stored now. Raises StaleWrite when a newer holder wrote."""
    writer, expected = fence.writer, fence.expected
    whole = {"op": "add", "path": "/status", "value": present({**status, "writer": writer})}
    # expected None: a new pool, no status yet (a test of a missing member passes with null)
    path = "/status/writer" if expected is not None else "/status"
    condition = {"op": "test", "path": path, "value": expected}
    for _ in range(ATTEMPTS):
        try:
            _json_patch(api, namespace, name, [condition, whole])
            return writer
        except kubernetes.client.ApiException as error:
            if error.status not in (409, 422):
                raise
            failure = error
        current = api.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, _request_timeout=TIMEOUT
        )
        seen = (current.get("status") or {}).get("writer")
        if newer(seen, writer):
            assert seen is not None
            why = f"a newer holder of the shard wrote it: {seen.get('holder')}"
            raise StaleWrite(seen, f"{why} (token {seen.get('token')})")
        if not fence.serving():
            raise StaleWrite(seen, "this replica no longer serves the pool")
        if condition["path"] == "/status/writer" and seen is not None and seen == expected:
            raise failure  # the test held: the write itself was refused (say, the schema)
        version = current["metadata"]["resourceVersion"]
        condition = {"op": "test", "path": "/metadata/resourceVersion", "value": version}
    raise failure


def _json_patch(api: Any, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
    api.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, ops,
        _content_type="application/json-patch+json", _request_timeout=TIMEOUT,
    )  # fmt: skip
