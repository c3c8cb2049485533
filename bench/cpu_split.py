"""Where a bench's CPU-seconds went, machine-wide, by kind of process: the operator's own Python,
the engine processes it started (Pulumi CLI and plugins, live or already reaped), the API server
and etcd, the emulator, the S3 gateway, and the rest.

A snapshot is taken before and after; a process alive at both counts its difference, one born
in between counts whole, and one that ended in between is counted by its parent when reaped
(the operator's `children_*` times: its engine runs)."""

import psutil

KINDS = ("operator", "engine", "kube", "emulator", "s3", "other")

Snapshot = dict[int, tuple[str, float, float]]  # pid -> (kind, own CPU-s, reaped children's)


def _kind(name: str, cmdline: list[str]) -> str:
    line = " ".join(cmdline)
    if name.startswith("pulumi"):
        return "engine"
    if name in {"kube-apiserver", "etcd", "kube-controller-manager", "kubectl"}:
        return "kube"
    if name == "versitygw":
        return "s3"
    if "operator run" in line:
        return "operator"
    if "emulator" in line:
        return "emulator"
    return "other"


def snapshot() -> Snapshot:
    taken: Snapshot = {}
    for process in psutil.process_iter(["name", "cmdline"]):
        try:
            times = process.cpu_times()
            kind = _kind(process.info["name"] or "", process.info["cmdline"] or [])
        except psutil.Error:
            continue
        reaped = times.children_user + times.children_system
        taken[process.pid] = (kind, times.user + times.system, reaped)
    return taken


def split(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """CPU-s by kind between the two snapshots; an operator's reaped children are its engine."""
    spent = dict.fromkeys(KINDS, 0.0)
    for pid, (kind, own, reaped) in after.items():
        _, own_before, reaped_before = before.get(pid, (kind, 0.0, 0.0))
        spent[kind] += own - own_before
        spent["engine" if kind == "operator" else kind] += reaped - reaped_before
    return spent


def line(spent: dict[str, float], per: float = 1.0, unit: str = "") -> str:
    total = sum(spent.values())
    parts = "  ".join(f"{kind} {spent[kind] / per:.2f}" for kind in KINDS if spent[kind] > 0)
    return f"CPU-s{unit} {total / per:.2f}: {parts}"
