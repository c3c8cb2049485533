"""Benchmark: wall time of the engine's operations against the emulator, and their memory.

Issue 4's targets on this machine: an `up` of 20 instances under 30 s; a no-change refresh of a
5-instance pool under 5 s. The bench starts its own emulator on loopback (boot delay 0, state in
a temporary directory), a file backend in the same directory, and for each N in `--sizes` runs
a fresh pool: `up` from nothing, a no-change `up`, a no-change `refresh`, then `destroy`.
Peak memory is the largest resident set of any process the runs spawned and reaped (the pulumi
CLI, the tencentcloud plugin), read from getrusage(RUSAGE_CHILDREN); the bench's own peak (the
Python program, run inline) is printed beside it.

    .venv/bin/python bench/engine_ops.py [--sizes 1 5 20]
"""

import argparse
import os
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

from pydantic import SecretStr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spotpool.api.stackconfig import PoolIdentity, StackConfig  # noqa: E402
from spotpool.engine.credentials import Credentials  # noqa: E402
from spotpool.engine.settings import EngineSettings  # noqa: E402
from spotpool.engine.stack import PoolStack  # noqa: E402
from tests.emulator.harness import SECRET_ID, SECRET_KEY, start_emulator  # noqa: E402
from tests.engine.conftest import REGION, pool_spec  # noqa: E402


def _timed(label: str, call: Callable[[], object]) -> float:
    started = time.monotonic()
    call()
    seconds = time.monotonic() - started
    print(f"  {label:<22} {seconds:6.2f} s", flush=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 5, 20])
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="spotpool-bench-") as tmp:
        work = Path(tmp)
        emulator = start_emulator(work / "cloud.db", work / "emulator.log", boot_seconds=0)
        (work / "backend").mkdir()
        settings = EngineSettings(
            backend_url=f"file://{work / 'backend'}",
            passphrase=SecretStr("bench-passphrase"),
            work_root=work / "workspaces",
            cloud_endpoint=emulator.endpoint,
        )
        creds = Credentials(secret_id=SecretStr(SECRET_ID), secret_key=SecretStr(SECRET_KEY))
        try:
            for n in args.sizes:
                pool = PoolIdentity(namespace="bench", name=f"pool-{n}", uid=str(uuid.uuid4()))
                stack = PoolStack(pool, settings, creds, REGION)
                config = StackConfig.from_spec(pool, pool_spec(n))
                print(f"N = {n}")
                up = partial(stack.up, config)
                _timed("up (create)", up)
                _timed("up (no change)", up)
                _timed("refresh (no change)", stack.refresh)
                _timed("destroy", stack.destroy)
        finally:
            emulator.stop()
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: engine processes {children:.0f} MiB, this Python process {own:.0f} MiB")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
