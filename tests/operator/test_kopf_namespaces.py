"""A namespace that shows up only in kopf's namespace watch-stream listing is served (kopf alone
skips listed objects: a namespace made between its two listings was never served)."""

import asyncio
from typing import Any

import pytest
from kopf._cogs.structs import references
from kopf._core.reactor import observation
from spotpool_operator.process import kopf_namespaces

pytestmark = pytest.mark.unit

PATTERNS = ["sh-*"]


def _event(name: str, type_: str | None, **metadata: Any) -> Any:
    return {"type": type_, "object": {"metadata": {"name": name, **metadata}}}


async def _served(*events: Any) -> set[str]:
    kopf_namespaces.install()
    insights = references.Insights()
    for event in events:
        await observation.process_discovered_namespace_event(
            raw_event=event, namespaces=PATTERNS, insights=insights
        )
    return {str(ns) for ns in insights.namespaces}


def test_a_namespace_seen_only_in_a_listing_is_served() -> None:
    assert asyncio.run(_served(_event("sh-late", None))) == {"sh-late"}


def test_listings_keep_kopfs_rules() -> None:
    served = asyncio.run(
        _served(
            _event("other", None),
            _event("sh-added", "ADDED"),
            _event("sh-kept", None),
            _event("sh-kept", "DELETED", deletionTimestamp="2026-11-26T00:00:00Z"),
        )
    )
    assert served == {"sh-added"}


def test_kopf_alone_skips_listed_namespaces() -> None:
    """What the module is for: kopf's own processor ignores the listed namespace."""
    insights = references.Insights()
    event = _event("sh-late", None)
    asyncio.run(
        kopf_namespaces._kopf_process(raw_event=event, namespaces=PATTERNS, insights=insights)
    )
    assert insights.namespaces == set()
