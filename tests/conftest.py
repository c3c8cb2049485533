"""Shared test helpers: the pinned tools (a missing tool fails the test, never skips it), an
event loop for Pulumi's in-process mocks, one heavy world at a time, the suite's rules at
collection (a tier on every module; the longest modules handed out first), and the slowest
modules printed at the end of every run."""

import asyncio
import fcntl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        asked = time.monotonic()
        fcntl.flock(held, fcntl.LOCK_EX)
        # The wait is the other worker's heavy test, not this module's cost (the summary below).
        request.node.user_properties.append((HEAVY_WAIT, time.monotonic() - asked))
        yield


# The hand-out order (tests/_support/scheduling.py hands the files out in it): the heavy
# modules in their lane, longest first, and the longest light modules first (their seconds in
# a parallel run), then every other e2e module, the engine's and emulator's, and the unit tests
# last: a long module handed out late would run alone at the end.
HEAVY = (
    "e2e/test_operator_shards",  # 206 s
    "e2e/test_fast_path_handover",  # 155
    "e2e/test_delete_mid_storm",  # 105
    "e2e/test_fencing_operators",  # 96
    "e2e/test_demo",  # 89
    "e2e/test_limits_replicas",  # 65: three replicas, 20 pools
    "e2e/test_frozen_replica",  # 59
    "e2e/test_fencing",  # 45 (one test heavy)
)
LONGEST_FIRST = (
    "e2e/test_shared_account",  # 323 alone on a loaded machine: two clusters, a rebuilt one
    "e2e/test_docs_recipes",  # 196 alone on a loaded machine: one world, one operator
    "e2e/test_one_identity",  # 287 under load 22: two clusters, an etcd clone; one backend, two
    "e2e/test_credentials_lifetime",  # 167, waiting for 70 s boots most of it
    "e2e/test_operator",  # 125
    "e2e/test_limits_held",  # 110
    "e2e/test_deploy",  # 98
    "e2e/test_node_pools",  # 70 alone: one world with nodes (scheduler, KWOK), three pools
    "e2e/test_misbehaving_cloud",  # 72-124: lost answers, a lagging listing, throttling
    "e2e/test_notice_bounds",  # 89
    "e2e/test_notices",  # 70
    "engine/test_engine_emulator",  # 57
    "e2e/test_capacity",  # 54
    "e2e/test_helm",  # 53
    "e2e/test_drift",  # 50
    "e2e/test_on_notice",  # 49
    "engine/test_lost_answers",  # 33-65
    "engine/test_surge",  # 47
    "engine/test_preview",  # 47
    "e2e/test_doubtful_reads",  # 45: one operator, one pool; its sweeps run in-process
    "e2e/test_nodes_world",  # 23-44 (load 6-13): kube-scheduler, KWOK and the node agent
    "e2e/test_node_drain",  # 12: drains on the session's cluster, no operator
)


def _order(item: pytest.Item) -> tuple[int, int]:
    module = f"{item.path.parent.name}/{item.path.stem}"
    for rank, listed in enumerate((HEAVY, LONGEST_FIRST)):
        if module in listed:
            return rank, listed.index(module)
    tier = "e2e" in item.path.parts, "engine" in item.path.parts or "emulator" in item.path.parts
    return (2 if tier[0] else 3 if tier[1] else 4), 0


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: `-n N --dist loadfile`
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadfile":
        return None
    from tests._support.scheduling import HeavyLaneScheduling

    heavy = frozenset(f"tests/{module}.py" for module in HEAVY)
    return HeavyLaneScheduling(config, log, heavy)


def unlisted_heavy(items: list[pytest.Item]) -> list[str]:
    """Modules with a `heavy` test that HEAVY does not list: the scheduler's lane would miss
    them (tests/test_suite_house.py checks the other way, HEAVY naming no light module)."""
    marked = {
        f"{item.path.parent.name}/{item.path.stem}"
        for item in items
        if item.get_closest_marker("heavy") is not None
    }
    return sorted(marked - set(HEAVY))


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
    heavy = unlisted_heavy(items)
    if heavy:
        raise pytest.UsageError(
            f"tests/conftest.py's HEAVY must list every module with a heavy test: {heavy}"
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


# The slowest modules, at the end of every run (also under xdist: the controller gets every
# worker's reports). A module's seconds are its tests' setup, call and teardown (its module
# fixtures' worlds included), less the time its heavy tests waited for another worker's; `span`
# is from its first test's start to its last's end.
HEAVY_WAIT = "heavy_lock_wait_seconds"


@dataclass
class ModuleTime:
    seconds: float = 0.0
    waited: float = 0.0
    tests: int = 0
    start: float = float("inf")
    stop: float = 0.0


MODULE_TIMES: dict[str, ModuleTime] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slowest-modules", type=int, default=15, metavar="N",
        help="print the N slowest test modules at the end (0: none)",
    )  # fmt: skip


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = MODULE_TIMES.setdefault(report.nodeid.split("::", 1)[0], ModuleTime())
    module.seconds += report.duration
    for name, value in report.user_properties:
        if name == HEAVY_WAIT and report.when == "setup" and isinstance(value, int | float):
            module.waited += value
    module.tests += report.when == "call"
    module.start, module.stop = min(module.start, report.start), max(module.stop, report.stop)


def slowest_modules(times: dict[str, ModuleTime], count: int) -> list[str]:
    """The summary's lines: the `count` modules of the most seconds (their heavy waits out)."""
    ranked = sorted(times.items(), key=lambda kv: kv[1].seconds - kv[1].waited, reverse=True)
    lines = [f"{'seconds':>8} {'waited':>7} {'span':>7} {'tests':>5}  module"]
    for name, t in ranked[:count]:
        lines.append(
            f"{t.seconds - t.waited:8.1f} {t.waited:7.1f} {t.stop - t.start:7.1f} {t.tests:5d}  "
            f"{name}"
        )
    total = sum(t.seconds - t.waited for t in times.values())
    lines.append(f"{total:8.1f} in all, {len(times)} modules")
    return lines


@pytest.hookimpl(trylast=True)  # after the durations: the last thing the run prints
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    count = config.getoption("--slowest-modules")
    if count and MODULE_TIMES:
        terminalreporter.write_sep("=", f"slowest {count} modules")
        for line in slowest_modules(MODULE_TIMES, count):
            terminalreporter.write_line(line)
