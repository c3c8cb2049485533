"""`spotpool demo` end to end: emulator, cluster, CRD, pools, a reclaim — and nothing left over."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_tool


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that name `text` (our emulator, etcd, kube-apiserver)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline and "pytest" not in cmdline:
            found.append(cmdline)
    return found


@pytest.mark.e2e
def test_demo_runs_the_local_world_and_cleans_up(tmp_path: Path) -> None:
    for tool in ("etcd", "kube-apiserver", "kubectl"):
        require_tool(tool)
    result = subprocess.run(
        [sys.executable, "-m", "spotpool", "demo", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "spotpool-sample" in out and "gpu-pool" in out  # both manifests admitted
    assert "pool default.gpu-pool: 2 of 3" in out  # 3 booted, 1 reclaimed
    assert "Secret tencentcloud" in out
    emulator_log = (tmp_path / "emulator.log").read_text()
    assert "action=cvm.RunInstances" in emulator_log
    assert "admin=reclaim" in emulator_log
    assert _processes_mentioning(str(tmp_path)) == []
