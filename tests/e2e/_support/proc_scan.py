"""Watch the processes under the operator while it works: every /proc/<pid>/cmdline and
/proc/<pid>/environ of its descendants (the Pulumi CLIs, the provider plugins), searched for
secrets as long as the scan runs."""

import threading
from dataclasses import dataclass, field
from pathlib import Path

import psutil


@dataclass
class ProcScan:
    root: int  # the operator's pid
    secrets: dict[str, str]  # what -> value
    found: list[str] = field(default_factory=list)  # "what in <name>'s cmdline|environ"
    processes: dict[int, str] = field(default_factory=dict)  # pid -> name, every one seen
    environs: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> last environ
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> "ProcScan":
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            try:
                children = psutil.Process(self.root).children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                self._look(child.pid)

    def _look(self, pid: int) -> None:
        try:
            cmdline = (
                Path(f"/proc/{pid}/cmdline")
                .read_bytes()
                .replace(b"\0", b" ")
                .decode(errors="replace")
            )
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return  # gone meanwhile
        name = Path(cmdline.split(" ", 1)[0]).name or str(pid)
        self.processes[pid] = name
        environ = dict(
            item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item
        )
        self.environs[name] = environ
        for what, value in self.secrets.items():
            if value in cmdline:
                self.found.append(f"{what} in {name}'s cmdline")
            if value in raw.decode(errors="replace"):
                self.found.append(f"{what} in {name}'s environ")


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that name `text` (a world's emulator, etcd,
    kube-apiserver, operator), pytest's own aside: what a teardown left running."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline and "pytest" not in cmdline:
            found.append(cmdline)
    return found
