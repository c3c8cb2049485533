"""Kubernetes Events on a Spotpool, posted through kopf's own event queue."""

from typing import Any, Protocol, cast

import kopf


class Events(Protocol):
    def post(self, ref: dict[str, Any], type_: str, reason: str, message: str) -> None: ...


class KopfEvents:
    """Posts asynchronously (kopf queues and retries); safe to call from any handler."""

    def post(self, ref: dict[str, Any], type_: str, reason: str, message: str) -> None:
        kopf.event(
            kopf.Body(cast(kopf.RawBody, ref)), type=type_, reason=reason, message=message[:1000]
        )
