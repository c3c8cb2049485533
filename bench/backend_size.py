"""Benchmark: how many bytes a pool's stack takes in a file backend as operations pile up.

One pool of 2 instances on the emulator; `--ops` no-change refreshes (the operator's most
frequent Pulumi run), measuring the backend directory after every `--every` of them, twice:
"before" — Pulumi's defaults (plain JSON checkpoints, a .bak beside each, every update kept in
the history) — and "after" — the engine's settings (gzip, no backups, the last
`--keep` updates). Prints bytes per pool as the count grows and extrapolates linearly to
1,000 operations (a 1,000-operation run takes about 20 minutes per setting here).

    .venv/bin/python bench/backend_size.py [--ops 100] [--every 25] [--keep 10]
"""

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pydantic import SecretStr  # noqa: E402

from spotpool.api.spec import SpotpoolSpec  # noqa: E402
from spotpool.api.stackconfig import PoolIdentity, StackConfig  # noqa: E402
from spotpool.engine.basics.settings import EngineSettings  # noqa: E402
from spotpool.engine.stacks.stack import PoolStack  # noqa: E402
from spotpool.engine.tencent.credentials import Credentials  # noqa: E402
from spotpool.localworld.emulator import SECRET_ID, SECRET_KEY, start_emulator  # noqa: E402

SPEC = {
    "region": "ap-singapore",
    "availabilityZone": "ap-singapore-2",
    "instanceType": "GN7.2XLARGE32",
    "minimum": 2,
    "maximum": 2,
    "imageId": "img-eb30mz89",
    "credentialsSecretRef": {"name": "tencentcloud"},
}


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def measure(work: Path, endpoint: str, ops: int, every: int, bounded: bool, keep: int) -> None:
    backend = work / ("after" if bounded else "before")
    backend.mkdir()
    settings = EngineSettings(
        backend_url=f"file://{backend}",
        passphrase=SecretStr("bench"),
        work_root=work / "ws",
        cloud_endpoint=endpoint,
        history_keep=keep if bounded else 0,
    )
    credentials = Credentials(secret_id=SecretStr(SECRET_ID), secret_key=SecretStr(SECRET_KEY))
    pool = PoolIdentity(
        namespace="bench", name=f"size-{uuid.uuid4().hex[:6]}", uid=str(uuid.uuid4())
    )
    stack = PoolStack(pool, settings, credentials, str(SPEC["region"]))
    config = StackConfig.from_spec(pool, SpotpoolSpec.model_validate(SPEC))
    defaults = {
        "PULUMI_DIY_BACKEND_GZIP": "false",
        "PULUMI_DIY_BACKEND_DISABLE_CHECKPOINT_BACKUPS": "false",
    }
    run_env = stack._run_env

    def env() -> dict[str, str]:
        return {**run_env(), **({} if bounded else defaults)}

    with mock.patch.object(stack, "_run_env", env):
        stack.up(config)
        started, points = time.monotonic(), []
        for n in range(1, ops + 1):
            stack.refresh()
            if n % every == 0 or n == ops:
                points.append((n, size(backend / ".pulumi")))
        stack.destroy()
    label = f"after (gzip, no backups, last {keep})" if bounded else "before (Pulumi defaults)"
    print(f"{label}: {ops} refreshes in {time.monotonic() - started:.0f} s")
    for n, total in points:
        print(f"  after {n:4d} operations: {total / 1024:8.1f} KiB")
    (n0, b0), (n1, b1) = points[0], points[-1]
    per_op = (b1 - b0) / max(1, n1 - n0)
    print(f"  growth {per_op / 1024:.2f} KiB per operation; at 1,000 operations "
          f"≈ {(b1 + per_op * (1000 - n1)) / 1024:.0f} KiB per pool")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=100)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--keep", type=int, default=10)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="spotpool-bench-") as tmp:
        work = Path(tmp)
        emulator = start_emulator(work / "cloud.db", work / "emulator.log", boot_seconds=0)
        try:
            for bounded in (False, True):
                measure(work, emulator.endpoint, args.ops, args.every, bounded, args.keep)
        finally:
            emulator.stop()


if __name__ == "__main__":
    main()
