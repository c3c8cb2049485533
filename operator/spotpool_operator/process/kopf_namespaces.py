"""Namespaces kopf would never serve: counted from its namespace watch-stream's listings too.

With namespace patterns (`--namespace 'team-*'`) kopf lists the namespaces once, then starts a
namespace watch-stream that lists them again before it watches. Its processor skips every
listed object (type None), counting only ADDED/MODIFIED/DELETED events. A namespace created
between the two listings, or while the stream relists after "410 Gone", is therefore never
served: no Spotpool watch-stream starts there until the operator restarts. Seen in the
two-replica e2e, whose slowed replica makes that window seconds long. kopf 1.45.2 is pinned;
this counts listed namespaces as well, and wakes kopf's orchestrator only on a change.
"""

import logging
from collections.abc import Collection
from typing import Any

from kopf._cogs.structs import references
from kopf._core.reactor import observation

log = logging.getLogger(__name__)
_kopf_process = observation.process_discovered_namespace_event


async def process_namespace_event(
    *,
    raw_event: Any,
    namespaces: Collection[references.NamespacePattern],
    insights: references.Insights,
    **options: Any,
) -> None:
    """kopf's processor, and for a listed namespace (type None) kopf's own revision of the
    served set, applied when it adds or removes a namespace."""
    if raw_event["type"] is not None:
        await _kopf_process(
            raw_event=raw_event, namespaces=namespaces, insights=insights, **options
        )
        return
    async with insights.revised:
        before = set(insights.namespaces)
        observation.revise_namespaces(
            raw_events=[raw_event], insights=insights, namespaces=namespaces
        )
        if insights.namespaces != before:
            added = sorted(str(ns) for ns in insights.namespaces - before)
            log.info("namespaces served from a listing kopf would have skipped: %s", added)
            insights.revised.notify_all()


def install() -> None:
    """Before kopf.run: kopf looks the processor up in its module when it starts watching."""
    observation.process_discovered_namespace_event = process_namespace_event
