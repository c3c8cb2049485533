"""`spotpool demo` end to end: emulator, cluster, CRD, the operator converging the article's pool,
a reclaim replaced, the pool destroyed — and nothing left over."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_tool
from tests.e2e._support.proc_scan import processes_mentioning


@pytest.mark.e2e
@pytest.mark.heavy
def test_demo_runs_the_local_world_and_cleans_up(tmp_path: Path) -> None:
    for tool in ("etcd", "kube-apiserver", "kubectl", "pulumi", "pulumi-resource-tencentcloud"):
        require_tool(tool)
    result = subprocess.run(
        [sys.executable, "-m", "spotpool", "demo", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "phase Ready, 2 of 2 ready, 2 exist" in out  # the operator converged the pool
    assert "event Reclaimed" in out and "event Replaced" in out
    assert "status.reclaims: total 1" in out
    assert re.search(r"spotpool-sample\s+2\s+2\s+Ready", out)  # kubectl get spotpools
    # -o wide: 1 reclaim, seconds ago, the last operation an up that succeeded
    assert re.search(r"RECLAIMS\s+LAST-RECLAIM\s+LAST-OP\s+RESULT", out), out
    # (the wide columns end RECLAIMS LAST-RECLAIM LAST-OP RESULT, whatever comes before them)
    assert re.search(r"Ready\s.*\s1\s+\d+[sm]\s+up\s+succeeded", out), out
    assert '"pool": "default/spotpool-sample"' in out  # pulumi stack output
    assert "instances of the pool left in the cloud: 0" in out
    emulator_log = (tmp_path / "emulator.log").read_text()
    assert "action=cvm.RunInstances" in emulator_log
    assert "admin=reclaim" in emulator_log
    assert processes_mentioning(str(tmp_path)) == []
