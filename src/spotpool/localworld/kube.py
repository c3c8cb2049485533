"""kubectl against a local (or any) cluster, by kubeconfig: how the local world's users act."""

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Kube:
    kubeconfig: Path
    kubectl: Path

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        return subprocess.run(
            [str(self.kubectl), *args],
            input=stdin,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        result = self.run(*args, stdin=stdin)
        assert result.returncode == 0, result.stderr
        return result.stdout
