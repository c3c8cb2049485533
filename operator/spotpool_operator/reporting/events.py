"""Kubernetes Events on a Spotpool, posted through kopf's own event queue, and fenced like
status: a replica that no longer serves the pool posts none. Every message is masked as log
lines are (logmask.py): the pool's tenants read its Events."""

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol, cast

import kopf

from spotpool_operator.reporting.logmask import mask

log = logging.getLogger("spotpool_operator.events")


class Events(Protocol):
    def post(self, ref: dict[str, Any], type_: str, reason: str, message: str) -> None: ...


class KopfEvents:
    """Posts asynchronously (kopf queues and retries); safe to call from any handler."""

    def post(self, ref: dict[str, Any], type_: str, reason: str, message: str) -> None:
        kopf.event(
            kopf.Body(cast(kopf.RawBody, ref)), type=type_, reason=reason,
            message=mask(message)[:1000],
        )  # fmt: skip


class DirectEvents:
    """Posts through the API server at once (blocking: call it from a thread), for work that
    runs outside kopf's handlers, where kopf's event queue is not set up (the sweep of
    deleted pools' instances); a failed post is logged, never raised."""

    def __init__(self, core: Any) -> None:
        self.core = core  # a kubernetes.client.CoreV1Api

    def post(self, ref: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = ref.get("metadata") or {}
        namespace = meta.get("namespace")
        now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        body = {
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": namespace},
            "involvedObject": {"apiVersion": ref.get("apiVersion"), "kind": ref.get("kind"),
                               **meta},
            "type": type_, "reason": reason, "message": mask(message)[:1000],
            "source": {"component": "spotpool-operator"}, "reportingComponent": "spotpool-operator",
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }  # fmt: skip
        try:
            self.core.create_namespaced_event(namespace, body, _request_timeout=30)
        except Exception as error:  # the log line and the metric stand
            log.warning("event %s not posted: %s", reason, type(error).__name__)


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
