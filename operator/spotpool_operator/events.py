"""Kubernetes Events on a Spotpool, posted through kopf's own event queue, and fenced like
status: a replica that no longer serves the pool posts none."""

import logging
from collections.abc import Callable
from typing import Any, Protocol, cast

import kopf

log = logging.getLogger("spotpool_operator.events")


class Events(Protocol):
    def post(self, ref: dict[str, Any], type_: str, reason: str, message: str) -> None: ...


class KopfEvents:
    """Posts asynchronously (kopf queues and retries); safe to call from any handler."""

    def post(self, ref: dict[str, Any], type_: str, reason: str, message: str) -> None:
        kopf.event(
            kopf.Body(cast(kopf.RawBody, ref)), type=type_, reason=reason, message=message[:1000]
        )


class FencedEvents:
    """Posts a pool's Event only if this replica serves the pool at the moment of the post
    (its shard's Lease held), else drops it with a log line: the shard's new holder reports
    now, and a replica that stalled between its work and the post must not tell a story that
    is no longer its own (a `Reclaimed` for an instance the new holder already replaced). The
    Events API takes no precondition on another object (the pool's status writer), so this
    check, right before the post, is as close to the write as the medium allows."""

    def __init__(self, inner: Events, serves: Callable[[str], bool]) -> None:
        self.inner, self.serves = inner, serves
        self.dropped = 0

    def post(self, ref: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = ref.get("metadata") or {}
        uid = meta.get("uid")
        if uid and not self.serves(str(uid)):
            self.dropped += 1
            log.info(
                "event %s on %s/%s not posted: this replica no longer serves the pool",
                reason, meta.get("namespace"), meta.get("name"),
            )  # fmt: skip
            return
        self.inner.post(ref, type_, reason, message)
