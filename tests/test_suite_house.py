"""The suite's own rules, read from its source: every test module names its tier, no test module
imports another (helpers live in a conftest.py or a `_support` package), and no unit test
asserts how long something took (timings are benchmarks, under bench/): no ordering comparison
on a clock read (`time.monotonic()`, `monotonic()` imported from time, `datetime.now()`), on a
name assigned from one, or on a duration the code reports (`result.seconds`)."""

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).parent
TIERS = {"unit", "integration", "e2e"}
CLOCKS = {"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns", "time_ns"}
DATETIME_CLOCKS = {"now", "utcnow", "today"}
# Durations the code measures and reports (CheckpointReport.seconds, InstallRecord.seconds...).
REPORTED = {"seconds", "elapsed", "duration", "took", "took_seconds", "wall_seconds"}


def _modules() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(TESTS.rglob("test_*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def _marks(node: ast.AST) -> set[str]:
    """The tier marks named in an expression (`pytest.mark.unit`, lists of marks)."""
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and n.attr in TIERS}


def _module_tiers(tree: ast.Module) -> set[str]:
    return {
        tier
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
        for tier in _marks(node.value)
    }


def _tests(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test_"
        ):
            yield node


def test_every_test_names_exactly_one_tier() -> None:
    wrong = []
    for path, tree in _modules():
        module = _module_tiers(tree)
        for test in _tests(tree):
            tiers = module | {t for d in test.decorator_list for t in _marks(d)}
            if len(tiers) != 1:
                wrong.append(f"{path.relative_to(TESTS)}::{test.name}: {sorted(tiers)}")
    assert not wrong, wrong


def _imported_tests(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, name) of each import of a test module: `tests.x.test_y` absolutely, or
    relatively (`from .test_y import z`, `from . import test_y`, `from ..e2e.test_y import z`)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            names = [module, *(f"{module}.{a.name}".replace("..", ".") for a in node.names)]
            names = [n.lstrip(".") if node.level else n for n in names]
            relative = node.level > 0
        elif isinstance(node, ast.Import):
            names, relative = [a.name for a in node.names], False
        else:
            continue
        for name in names:
            parts = [part for part in name.split(".") if part]
            if (relative or parts[:1] == ["tests"]) and any(
                part.startswith("test_") for part in parts
            ):
                yield node.lineno, name
                break


def test_the_heavy_lane_lists_exactly_the_modules_with_a_heavy_test() -> None:
    from tests.conftest import HEAVY

    marked = {
        f"{path.parent.name}/{path.stem}"
        for path, tree in _modules()
        if any(isinstance(n, ast.Attribute) and n.attr == "heavy" for n in ast.walk(tree))
    }
    assert marked == set(HEAVY)


def test_no_test_module_imports_another() -> None:
    wrong = [
        f"{path.relative_to(TESTS)}:{line}: {name}"
        for path, tree in _modules()
        for line, name in _imported_tests(tree)
    ]
    assert not wrong, wrong


def _clock_names(tree: ast.Module) -> set[str]:
    """The names a module imported a clock under (`from time import monotonic as now`)."""
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "time"
        for alias in node.names
        if alias.name in CLOCKS
    }


def _reads_a_clock(node: ast.AST, imported: set[str] = frozenset()) -> bool:  # type: ignore[assignment]
    """A call of a clock: `time.monotonic()`, an imported `monotonic()`, `datetime.now()`
    (`datetime.datetime.now(UTC)`, `date.today()`)."""
    for n in ast.walk(node):
        if not isinstance(n, ast.Call):
            continue
        func = n.func
        if isinstance(func, ast.Name) and func.id in imported:
            return True
        if not isinstance(func, ast.Attribute):
            continue
        owner = func.value
        owner_name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", None)
        if func.attr in CLOCKS and owner_name == "time":
            return True
        if func.attr in DATETIME_CLOCKS and owner_name in ("datetime", "date"):
            return True
    return False


def _reports_a_duration(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr in REPORTED for n in ast.walk(node))


def _clock_bounds(tree: ast.Module) -> Iterator[int]:
    """Lines of asserts on the wall clock: on a clock read, or on a name assigned from one."""
    imported = _clock_names(tree)
    timed = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and _reads_a_clock(node.value, imported)
        for target in node.targets
        if isinstance(target, ast.Name)
    }

    def timed_side(side: ast.AST) -> bool:
        return (
            _reads_a_clock(side, imported)
            or _reports_a_duration(side)
            or any(isinstance(n, ast.Name) and n.id in timed for n in ast.walk(side))
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.Assert) and any(
            isinstance(c, ast.Compare)
            and any(isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE) for op in c.ops)
            and any(timed_side(side) for side in [c.left, *c.comparators])
            for c in ast.walk(node.test)
        ):
            yield node.lineno


def test_no_unit_test_asserts_on_the_wall_clock() -> None:
    wrong = [
        f"{path.relative_to(TESTS)}:{line}"
        for path, tree in _modules()
        if not _module_tiers(tree) & {"integration", "e2e"}  # unit, or unmarked
        for line in _clock_bounds(tree)
    ]
    assert not wrong, f"timings belong in bench/, the test asserts the behaviour: {wrong}"


def test_the_checks_see_what_they_look_for() -> None:
    bad = ast.parse(
        "import time\nfrom tests.e2e.test_operator import x\nstarted = time.monotonic()\n"
        "took = time.monotonic() - started\nassert took < 1.5\nassert f(time.time()) is None\n"
        "def test_a(): pass\n"
    )
    assert list(_clock_bounds(bad)) == [5]
    assert _module_tiers(bad) == set()
    assert list(_imported_tests(bad)) == [(2, "tests.e2e.test_operator")]
    marked = ast.parse(
        "import pytest\npytestmark = [pytest.mark.e2e, pytest.mark.usefixtures('x')]"
    )
    assert _module_tiers(marked) == {"e2e"}


@pytest.mark.parametrize(
    "source",
    [
        "from tests.e2e.test_operator import x",
        "import tests.operator.test_slots",
        "from tests.operator import test_slots",
        "from .test_slots import x",
        "from . import test_slots",
        "from ..e2e.test_operator import x",
        "from .. import test_notices as notices",
    ],
)
def test_the_import_rule_catches_every_form_of_a_test_module_import(source: str) -> None:
    assert [line for line, _ in _imported_tests(ast.parse(source))] == [1], source


@pytest.mark.parametrize(
    "source",
    [
        "from tests.conftest import require_tool",
        "from tests.e2e._support.replicas import Replicas",
        "from . import fakes",
        "from .world import pool_manifest",
        "import pytest",
    ],
)
def test_the_import_rule_lets_helpers_be_imported(source: str) -> None:
    assert list(_imported_tests(ast.parse(source))) == [], source


@pytest.mark.parametrize(
    "source",
    [
        "import time\nassert time.monotonic() - t0 < 2",
        "from time import monotonic\nstart = monotonic()\nassert monotonic() - start < 2",
        "from time import perf_counter as clock\nt = clock()\nassert t > 0",
        "from datetime import datetime\nassert datetime.now() > deadline",
        "import datetime\nnow = datetime.datetime.now(UTC)\nassert now - then < limit",
        "assert result.seconds >= 0.5",
        "assert 0 < report.elapsed",
    ],
)
def test_the_clock_rule_catches_every_clock_and_reported_duration(source: str) -> None:
    assert list(_clock_bounds(ast.parse(source))), source


@pytest.mark.parametrize(
    "source",
    [
        "assert clock() - started >= 6",  # a fake clock the test advances
        "now = datetime.now(UTC)\nassert now.year == 2026",  # no ordering on it
        "assert timedelta(seconds=5) < limit",  # a constructed duration, no report
        "assert len(calls) > 2",
    ],
)
def test_the_clock_rule_lets_fake_clocks_and_counts_be(source: str) -> None:
    assert list(_clock_bounds(ast.parse(source))) == [], source
