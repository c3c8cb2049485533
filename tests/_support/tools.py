"""The pinned tools the tests run: a missing one fails the test that needs it, never skips it."""

from pathlib import Path

import pytest

from spotpool.toolchain.install import status
from spotpool.toolchain.manifest import TOOLS_BY_NAME


def require_tool(name: str) -> Path:
    """Path of a pinned tool, or a failure that says how to install it."""
    state = status(TOOLS_BY_NAME[name])
    if not state.ok:
        pytest.fail(
            f"{name} {state.version} is {state.detail}: run `spotpool toolchain install {name}`"
        )
    return state.path
