"""The suite's own rules, read from its source: every test module names its tier, no test module
imports another (helpers live in a conftest.py or a `_support` package), and no unit test
asserts how long something took (timings are benchmarks, under bench/)."""

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).parent
TIERS = {"unit", "integration", "e2e"}
CLOCKS = {"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns", "time_ns"}


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


def test_no_test_module_imports_another() -> None:
    wrong = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.startswith("tests") and name.rsplit(".", 1)[-1].startswith("test_"):
                    wrong.append(f"{path.relative_to(TESTS)}:{node.lineno}: {name}")
    assert not wrong, wrong


def _reads_a_clock(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr in CLOCKS
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "time"
        for n in ast.walk(node)
    )


def _clock_bounds(tree: ast.Module) -> Iterator[int]:
    """Lines of asserts on the wall clock: on a clock read, or on a name assigned from one."""
    timed = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and _reads_a_clock(node.value)
        for target in node.targets
        if isinstance(target, ast.Name)
    }

    def timed_side(side: ast.AST) -> bool:
        return _reads_a_clock(side) or any(
            isinstance(n, ast.Name) and n.id in timed for n in ast.walk(side)
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
    marked = ast.parse(
        "import pytest\npytestmark = [pytest.mark.e2e, pytest.mark.usefixtures('x')]"
    )
    assert _module_tiers(marked) == {"e2e"}
