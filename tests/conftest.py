"""Shared fixtures: the pinned tools, and a failure (never a skip) in CI when one is missing."""

import os
from pathlib import Path

import pytest

from spotpool.toolchain.install import status
from spotpool.toolchain.manifest import TOOLS_BY_NAME


def require_tool(name: str) -> Path:
    """Path of a pinned tool. Missing: a failure in CI, a skip with the fix elsewhere."""
    state = status(TOOLS_BY_NAME[name])
    if state.ok:
        return state.path
    message = f"{name} {state.version} is {state.detail}: run `spotpool toolchain install {name}`"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)
