"""Benchmark: wall time of the engine's operations against the emulator, and their memory.

Issue 4's targets on this machine: an `up` of 20 instances under 30 s; a no-change refresh of a
5-instance pool under 5 s. The bench starts its own emulator on loopback (boot delay 0, state in
a temporary directory), a file backend in the same directory, and for each N in `--sizes` runs
a fresh pool: `up` from nothing, a no-change `up`, a no-change `refresh`; then half the slots
(rounded up) lose their record in the state as a killed run leaves them and an `up` adopts
them; then as many are reclaimed by the cloud and `refresh` + `up` replace them (the cost that
adoption saves: new instances, which a spot market may not have); then `destroy`.
Peak memory is the largest resident set of any process the runs spawned and reaped (the pulumi
CLI, the tencentcloud plugin), read from getrusage(RUSAGE_CHILDREN); the bench's own peak (the
Python program, run inline) is printed beside it. Beside each time: how many Pulumi CLI
processes the operation started (each costs a process start and a backend read), and a
targeted replacement (`replace_slots`, the operator's reclaim path) is timed beside the
refresh-then-up way.

    .venv/bin/python bench/engine_ops.py [--sizes 1 5 20] [--secrets-provider keyserver]
"""

import argparse
import os
import resource
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

import psutil
from pulumi import automation as auto
from pydantic import SecretStr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spotpool.api.stackconfig import PoolIdentity, StackConfig  # noqa: E402
from spotpool.engine.basics.errors import InstancesRemain  # noqa: E402
from spotpool.engine.basics.settings import EngineSettings  # noqa: E402
from spotpool.engine.stacks.stack import PoolStack  # noqa: E402
from spotpool.engine.tencent.credentials import Credentials  # noqa: E402
from spotpool.localworld.emulator import (  # noqa: E402
    SECRET_ID,
    SECRET_KEY,
    EmulatorProcess,
    start_emulator,
    wait_until,
)
from spotpool.localworld.engine import REGION, EngineWorld, pool_spec  # noqa: E402

CLI_RUNS: list[str] = []  # the subcommand of every Pulumi CLI process started
KINDS = ("pulumi CLI", "language host", "tencentcloud plugin", "other plugin", "program", "ours")
SAMPLE_EVERY = 0.01  # seconds between two looks at the processes and threads


def _kind_of(process: psutil.Process) -> str:
    name = os.path.basename(process.exe())
    if name == "pulumi":
        return "pulumi CLI"
    if name.startswith("pulumi-language"):
        return "language host"
    if name == "pulumi-resource-tencentcloud":
        return "tencentcloud plugin"
    return "other plugin" if name.startswith("pulumi-") else "other"


class CpuSampler:
    """CPU-s by process kind while an operation runs. Child processes are sampled every
    SAMPLE_EVERY s (their last sample counts; the tail a sample misses goes to the kind of the
    tree's root, the CLI, from getrusage(RUSAGE_CHILDREN), which is exact). In this process the
    inline program (served to the CLI by the Automation API's gRPC language server, in worker
    threads) is told from our own code (the engine, the Automation API's event reader: the main
    thread and its helpers) by thread: threads named ThreadPoolExecutor-*/asyncio_* are the
    program's; the rest is ours (this process's total comes from getrusage(RUSAGE_SELF))."""

    def __init__(self) -> None:
        self.me = psutil.Process(os.getpid())
        self.last: dict[int, tuple[str, float]] = {}  # pid -> (kind, cpu-s), children
        self.threads: dict[int, float] = {}  # native thread id -> cpu-s, program threads
        self.threads_at_start: dict[int, float] = {}
        self.stop = threading.Event()

    def _program_tids(self) -> set[int]:
        return {
            t.native_id
            for t in threading.enumerate()
            if t.native_id is not None and t.name.startswith(("ThreadPoolExecutor", "asyncio"))
        }

    def _sample(self) -> None:
        for child in self.me.children(recursive=True):
            try:
                with child.oneshot():
                    times = child.cpu_times()
                    self.last[child.pid] = (_kind_of(child), times.user + times.system)
            except psutil.Error:
                continue
            if self.last[child.pid][0] == "other":  # the emulator: not the engine's
                del self.last[child.pid]
        tids = self._program_tids()
        for thread in self.me.threads():
            if thread.id in tids:
                self.threads[thread.id] = thread.user_time + thread.system_time

    def __enter__(self) -> "CpuSampler":
        self.children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.self0 = resource.getrusage(resource.RUSAGE_SELF)
        self.last.clear()
        tids = self._program_tids()
        self.threads_at_start = {
            t.id: t.user_time + t.system_time for t in self.me.threads() if t.id in tids
        }
        self.threads = dict(self.threads_at_start)
        self.stop.clear()
        self.thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)
        self.thread.start()
        return self

    def _loop(self) -> None:
        while not self.stop.wait(SAMPLE_EVERY):
            self._sample()
        self.own = time.thread_time()  # the sampler's own cost, not the engine's

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self1 = resource.getrusage(resource.RUSAGE_SELF)
        total_children = _cpu(children1) - _cpu(self.children0)
        total_self = _cpu(self1) - _cpu(self.self0) - self.own
        split = dict.fromkeys(KINDS, 0.0)
        for kind, seconds in self.last.values():
            split[kind] += seconds
        sampled = sum(split.values())
        split["pulumi CLI"] += max(0.0, total_children - sampled)  # the unsampled tails
        program = sum(v - self.threads_at_start.get(t, 0.0) for t, v in self.threads.items())
        split["program"] = min(program, total_self)
        split["ours"] = total_self - split["program"]
        self.split = split
        self.clis = sum(1 for kind, _ in self.last.values() if kind == "pulumi CLI")


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


TOTALS: dict[str, dict[str, float]] = {}  # operation -> kind -> CPU-s


def _count_cli_runs() -> None:
    """Count every CLI process the Automation API starts, by wrapping its one way to run one."""
    run = auto.PulumiCommand.run

    def counted(self: auto.PulumiCommand, args: list[str], *rest: object, **kw: object) -> object:
        CLI_RUNS.append(args[0] if args else "")
        return run(self, args, *rest, **kw)  # type: ignore[arg-type]

    auto.PulumiCommand.run = counted  # type: ignore[method-assign,assignment]


def _timed(label: str, call: Callable[[], object]) -> float:
    runs = len(CLI_RUNS)
    started = time.monotonic()
    with CpuSampler() as sampler:
        call()
    seconds = time.monotonic() - started
    commands = CLI_RUNS[runs:]
    split = sampler.split
    print(
        f"  {label:<24} {seconds:6.2f} s  {len(commands):2d} CLI runs ({' '.join(commands)})",
        flush=True,
    )
    parts = "  ".join(f"{kind} {split[kind]:.2f}" for kind in KINDS if split[kind] >= 0.005)
    print(f"  {'':<24} CPU {sum(split.values()):5.2f} s: {parts}", flush=True)
    total = TOTALS.setdefault(label, dict.fromkeys(KINDS, 0.0))
    for kind in KINDS:
        total[kind] += split[kind]
    return seconds


def _print_totals() -> None:
    """The whole run's CPU-s by process kind, and the count of CLI processes."""
    whole = {kind: sum(t[kind] for t in TOTALS.values()) for kind in KINDS}
    parts = "  ".join(f"{kind} {whole[kind]:.2f}" for kind in KINDS)
    print(f"CPU-s of the run {sum(whole.values()):.2f}: {parts}")
    print(f"CLI processes {len(CLI_RUNS)} ({' '.join(sorted(set(CLI_RUNS)))})")


def _runs(emulator: EmulatorProcess) -> int:
    """Instances the emulator has ever created (RunInstances calls, one instance each here)."""
    return len(emulator.all_instances())


def _replace(stack: PoolStack, up: Callable[[], object]) -> None:
    stack.refresh()
    up()


def _bench_pool(world: EngineWorld, stack: PoolStack, n: int) -> None:
    emulator = world.emulator
    up = partial(stack.up, StackConfig.from_spec(stack.pool, pool_spec(n)))
    _timed("up (create)", up)
    _timed("up (no change)", up)
    _timed("refresh (no change)", stack.refresh)
    half = list(range((n + 1) // 2))
    for slot in half:
        world.unrecord(stack, slot)
    made = _runs(emulator)
    _timed(f"up (adopt {len(half)})", up)
    print(f"  {'':<24} {_runs(emulator) - made} instance(s) created", flush=True)
    lost = {stack.state_instance_ids()[slot] for slot in half}
    emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": sorted(lost)})
    wait_until(lambda: not lost & set(world.cloud_instances(stack)), "the reclaim", 60)
    made = _runs(emulator)
    _timed(f"refresh+up (replace {len(half)})", partial(_replace, stack, up))
    print(f"  {'':<24} {_runs(emulator) - made} instance(s) created", flush=True)
    lost = {stack.state_instance_ids()[slot] for slot in half}
    emulator.admin_ok("POST", "/_emulator/reclaim", {"InstanceIds": sorted(lost)})
    wait_until(lambda: not lost & set(world.cloud_instances(stack)), "the reclaim", 60)
    made = _runs(emulator)
    config = StackConfig.from_spec(stack.pool, pool_spec(n))
    _timed(f"targeted (replace {len(half)})", partial(stack.replace_slots, config, half))
    print(f"  {'':<24} {_runs(emulator) - made} instance(s) created", flush=True)
    _timed("destroy", partial(_destroy, stack))


def _destroy(stack: PoolStack) -> None:
    try:
        stack.destroy()
    except InstancesRemain as err:  # a reclaimed instance not gone yet: the stack stays
        print(f"  ({err})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 5, 20])
    parser.add_argument(
        "--secrets-provider", choices=["passphrase", "keyserver"], default="passphrase",
        help="the stacks' secrets provider (keyserver: this process serves the data keys)",
    )  # fmt: skip
    args = parser.parse_args()
    _count_cli_runs()
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
            secrets_provider=args.secrets_provider,
        )
        creds = Credentials(secret_id=SecretStr(SECRET_ID), secret_key=SecretStr(SECRET_KEY))
        world = EngineWorld(emulator, settings, creds, [])
        try:
            for n in args.sizes:
                pool = PoolIdentity(namespace="bench", name=f"pool-{n}", uid=str(uuid.uuid4()))
                print(f"N = {n}")
                _bench_pool(world, PoolStack(pool, settings, creds, REGION), n)
        finally:
            emulator.stop()
    _print_totals()
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: engine processes {children:.0f} MiB, this Python process {own:.0f} MiB")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
