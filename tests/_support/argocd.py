"""Argo CD's view of a Spotpool: its health check (operator/deploy/argocd/health.lua) run by a
real Lua 5.1 (Argo CD's gopher-lua speaks 5.1), without io, os or require as in Argo's
sandbox."""

from pathlib import Path
from typing import Any

import lupa.lua51 as lua51  # type: ignore[import-untyped]

SCRIPT = Path(__file__).parents[2] / "operator" / "deploy" / "argocd" / "health.lua"


def health(obj: dict[str, Any], script: str | None = None) -> tuple[str, str]:
    """What Argo CD shows for `obj`: the script's (status, message)."""
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
    sandbox = runtime.globals()
    for name in ("io", "os", "require", "dofile", "loadfile", "package", "debug"):
        sandbox[name] = None
    sandbox.obj = runtime.table_from(obj, recursive=True)
    result = runtime.execute(script or SCRIPT.read_text())
    assert set(result.keys()) <= {"status", "message"}
    return str(result["status"]), str(result["message"])
