"""`make demo` installs exactly the tools the demo checks for; `make test` installs those and
every other tool of the manifest a test runs."""

import subprocess
from pathlib import Path

import pytest

from spotpool import demo
from spotpool.toolchain.install import ToolStatus
from spotpool.toolchain.manifest import TOOLS, Tool

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def _make_variable(name: str) -> list[str]:
    """The variable as make expands it (the Makefile's own rules are not run)."""
    result = subprocess.run(
        ["make", "-s", "--no-print-directory", "-f", "Makefile", "-f", "-", "print-it"],
        cwd=ROOT,
        input=f"print-it:\n\t@echo $({name})\n",
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return result.stdout.split()


def test_make_demo_installs_exactly_the_tools_the_demo_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def status(tool: Tool) -> ToolStatus:
        asked.append(tool.name)
        return ToolStatus(name=tool.name, version=tool.version, path=ROOT, ok=True, detail="")

    monkeypatch.setattr(demo, "status", status)
    demo._require_tools()
    assert sorted(_make_variable("DEMO_TOOLS")) == sorted(asked)


def test_make_test_installs_the_demos_tools_and_the_test_only_ones() -> None:
    demo_tools, test_tools = _make_variable("DEMO_TOOLS"), _make_variable("TEST_TOOLS")
    assert set(demo_tools) <= set(test_tools)
    assert set(test_tools) <= {tool.name for tool in TOOLS}
    assert len(test_tools) == len(set(test_tools))
    assert {"pulumi-language-python", "pulumi-resource-kubernetes", "versitygw", "helm"} <= set(
        test_tools
    ) - set(demo_tools)
    assert "prometheus" in test_tools
    # The local world's nodes: the tests', never the cold demo's.
    assert {"kube-scheduler", "kwok"} <= set(test_tools) - set(demo_tools)
