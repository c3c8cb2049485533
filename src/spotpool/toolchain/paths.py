"""Where the toolchain cache lives: user-level, outside any clone, keyed by versions."""

import os
from pathlib import Path

from spotpool.toolchain.manifest import Tool


def cache_root() -> Path:
    if explicit := os.environ.get("SPOTPOOL_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spotpool"


def tool_dir(tool: Tool) -> Path:
    revision = f"-{tool.revision}" if tool.revision else ""
    return cache_root() / "tools" / f"{tool.name}-{tool.version}{revision}"


def bin_dir() -> Path:
    """One directory of links to the pinned binaries: the only PATH entry a user needs."""
    return cache_root() / "bin"


def build_dir(tool: Tool) -> Path:
    return cache_root() / "build" / f"{tool.name}-{tool.version}"


def pulumi_home() -> Path:
    """Pulumi's own home (plugins, credentials): the user's, as the plain CLI would use."""
    return Path(os.environ.get("PULUMI_HOME") or Path.home() / ".pulumi")
