"""Shared test helpers: the pinned tools (a missing tool fails the test, never skips it), an
event loop for Pulumi's in-process mocks, one heavy world at a time, and the suite's rules at
collection (a tier on every module; the longest modules handed out first)."""

import asyncio
import fcntl
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotpool.cluster import s3
from tests._support.s3 import local_s3
from tests._support.tools import require_tool

__all__ = ["require_tool"]  # where the modules have always imported it from


@pytest.fixture
def s3_server(tmp_path: Path) -> Iterator[s3.LocalS3]:
    """A local S3 server (versitygw) on loopback, with its bucket, for this test."""
    with local_s3(tmp_path / "s3") as server:
        yield server


@pytest.fixture
def pulumi_event_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The current event loop Pulumi's mocks run on (they call asyncio.get_event_loop()).

    An earlier test's asyncio.run() ends by setting the current loop to None, after which
    get_event_loop() raises "no current event loop"; a test using the mocks gets a fresh one
    then (and keeps a usable one otherwise, as the mocks' outputs may be bound to it)."""
    try:
        loop = asyncio.get_event_loop()
    except RuntimeError:
        loop = None
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
    yield loop


@pytest.fixture(autouse=True)
def _one_heavy_world_at_a_time(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """A `heavy` test (several operators, or a storm: a machine's worth of processes) waits for
    any other worker's heavy test to end: three at once on two cores starved every process of
    them and of the tests beside them (Lease renewals late, precondition windows missed)."""
    if request.node.get_closest_marker("heavy") is None:
        yield
        return
    # The parent of a worker's base directory is the run's, shared by its xdist workers.
    lock = tmp_path_factory.getbasetemp().parent / "spotpool-heavy-test.lock"
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


# The longest modules first (their seconds in a parallel run, 2026-11-26), then every other e2e
# module, the engine's and emulator's, and the unit tests last: `make test` runs on every core
# (pytest-xdist hands each worker whole modules, and a worker keeps the next one queued), so a
# long module handed out late would run alone at the end.
# The heavy ones (marked `heavy`) are spread two light ones apart, so that a worker seldom
# waits for another's heavy test.
LONGEST_FIRST = (
    "e2e/test_operator_shards",  # 206 s, heavy
    "e2e/test_operator",  # 125
    "e2e/test_deploy",  # 98
    "e2e/test_credentials_lifetime",  # 167, heavy
    "e2e/test_notice_bounds",  # 89
    "e2e/test_notices",  # 70
    "e2e/test_fast_path_handover",  # 155, heavy
    "engine/test_engine_emulator",  # 57
    "e2e/test_capacity",  # 54
    "e2e/test_delete_mid_storm",  # 105, heavy
    "e2e/test_helm",  # 53
    "e2e/test_on_notice",  # 49
    "e2e/test_fencing_operators",  # 96, heavy
    "engine/test_surge",  # 47
    "engine/test_preview",  # 47
    "e2e/test_demo",  # 89, heavy
    "e2e/test_fencing",  # 45 (one test heavy)
    "e2e/test_drift",  # 50
    "e2e/test_frozen_replica",  # 59, heavy
    "e2e/test_docs_recipes",  # 196 alone on a loaded machine, heavy
)


def _order(item: pytest.Item) -> tuple[int, int]:
    module = f"{item.path.parent.name}/{item.path.stem}"
    if module in LONGEST_FIRST:
        return 0, LONGEST_FIRST.index(module)
    tier = "e2e" in item.path.parts, "engine" in item.path.parts or "emulator" in item.path.parts
    return (1 if tier[0] else 2 if tier[1] else 3), 0


# Every test module names its tier (pyproject's markers): `-m "not e2e"` and the like select by
# it, so a module without one would run in the wrong selection.
TIERS = ("unit", "integration", "e2e")


def tier_of(item: pytest.Item) -> list[str]:
    """The tier markers a test carries (its module's `pytestmark`, its class's, its own)."""
    return [tier for tier in TIERS if item.get_closest_marker(tier) is not None]


def untiered(items: list[pytest.Item], root: Path) -> list[str]:
    """The modules of `items` whose tests carry no tier, or more than one."""
    return sorted({str(item.path.relative_to(root)) for item in items if len(tier_of(item)) != 1})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wrong = untiered(items, config.rootpath)
    if wrong:
        raise pytest.UsageError(
            "every test module names exactly one tier: add `pytestmark = pytest.mark.unit` "
            f"(or integration, e2e; see pyproject's markers) to {', '.join(wrong)}"
        )
    # pytest-randomly shuffled the modules and each module's tests. An e2e module is one world
    # whose tests are a story in steps (a pool made, then moved, then deleted): its tests run
    # in the file's order; every other module's keep the shuffled order (the sort is stable).
    first: dict[Path, int] = {}
    for index, item in enumerate(items):
        first.setdefault(item.path, index)

    def key(item: pytest.Item) -> tuple[int, int, int, int]:
        story = (item.location[1] or 0) if "e2e" in item.path.parts else 0
        return (*_order(item), first[item.path], story)

    items.sort(key=key)
