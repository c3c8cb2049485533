"""A local world with nodes, without a kubelet: the real kube-scheduler binds pods, KWOK plays
the kubelets (node heartbeats, pods Running, deleted pods gone after their grace), and the node
agent (node_agent.py) registers a Node for each emulated instance whose user data joins.

So the real scheduler, the real Eviction API and real PodDisruptionBudgets decide what runs
where. Test tools only (`make test-tools`): the demo's cluster has no nodes.
"""

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from spotpool.children import tied_to_parent
from spotpool.cluster.local import load_state, start_scheduler, stop_scheduler
from spotpool.localworld.emulator import EmulatorProcess
from spotpool.localworld.node_agent import MANAGED_LABEL, MANAGED_VALUE, NodeAgent
from spotpool.toolchain.manifest import TOOLS_BY_NAME
from spotpool.toolchain.paths import tool_dir

STAGES = Path(__file__).with_name("kwok-stages.yaml")
READY_TIMEOUT_SECONDS = 60.0


# KWOK logs this once it has reached the API server with its Stages loaded, right before its
# controllers start (nodes registered before they list are picked up by that first list).
KWOK_STARTED = '"msg":"Watch nodes"'


def kwok_args(binary: Path, kubeconfig: Path, lease_seconds: int) -> list[str]:
    """KWOK on the nodes the agent labels. No --server-address (nor --node-port): its kubelet
    API (logs, exec, metrics) would listen without authenticating anyone, and nothing here
    uses it."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--config={STAGES}",
        f"--manage-nodes-with-label-selector={MANAGED_LABEL}={MANAGED_VALUE}",
        f"--node-lease-duration-seconds={lease_seconds}",  # renewed every quarter of it
        "--cidr=10.244.0.1/16",
    ]


@dataclass
class NodeWorld:
    """Nodes for the local cluster in `cluster_dir` (started by `cluster.local.up`), from the
    instances of `emulator`; `start` and `stop` around the world's life."""

    cluster_dir: Path
    emulator: EmulatorProcess
    directory: Path  # logs
    lease_seconds: int = 40  # the kubelet's default node lease
    agent_interval: float = 0.5
    agent: NodeAgent = field(init=False)
    kwok: subprocess.Popen[bytes] | None = None
    _own_scheduler: bool = False

    @property
    def kubeconfig(self) -> Path:
        return self.cluster_dir / "kubeconfig"

    def start(self) -> None:
        before = load_state(self.cluster_dir).scheduler_pid
        state = start_scheduler(self.cluster_dir, tie_to_parent=True)
        self._own_scheduler = state.scheduler_pid != before
        try:
            self._start_kwok()
            self.agent = NodeAgent(
                self.emulator, self.kubeconfig, self.agent_interval,
                log_file=self.directory / "node-agent.log",
            )  # fmt: skip
            self.agent.start()
        except BaseException:
            self._stop_processes()
            raise

    def _start_kwok(self) -> None:
        binary = tool_dir(TOOLS_BY_NAME["kwok"]) / "kwok"
        if not binary.exists():
            raise RuntimeError("kwok is not installed: run `spotpool toolchain install kwok`")
        self.directory.mkdir(parents=True, exist_ok=True)
        log = self.directory / "kwok.log"
        log.unlink(missing_ok=True)  # its start line is looked for in this run's log only
        with log.open("ab") as out:
            self.kwok = subprocess.Popen(
                tied_to_parent(kwok_args(binary, self.kubeconfig, self.lease_seconds)),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while KWOK_STARTED not in log.read_text(errors="replace"):
            if self.kwok.poll() is not None:
                raise RuntimeError(f"kwok exited with {self.kwok.returncode}: see {log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"kwok not started in {READY_TIMEOUT_SECONDS:.0f} s: {log}")
            time.sleep(0.1)

    def stop(self) -> None:
        """The agent, KWOK and the scheduler it started stop; the Nodes it registered go."""
        agent = getattr(self, "agent", None)
        if agent is not None:
            agent.stop()
        self._stop_processes()
        if agent is not None:
            agent.delete_nodes()

    def _stop_processes(self) -> None:
        if self.kwok is not None and self.kwok.poll() is None:
            self.kwok.terminate()
            try:
                self.kwok.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kwok.kill()
                self.kwok.wait(timeout=10)
        if self._own_scheduler:
            stop_scheduler(self.cluster_dir)
