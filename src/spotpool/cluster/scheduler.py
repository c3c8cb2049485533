"""How the local cluster runs kube-scheduler: its own identity, loopback only, as kubeadm does.

Only the local world's nodes need it (pods bound by the real scheduler, so the real Eviction
API and PodDisruptionBudgets decide where they go); `cluster.local` starts it when asked.
"""

from pathlib import Path

# Bound by RBAC's bootstrap policy (system:kube-scheduler and system:volume-scheduler).
SCHEDULER_USER = "system:kube-scheduler"


def component_args(binary: Path, kubeconfig: Path, port: int, cert_dir: Path) -> list[str]:
    """What kube-scheduler and kube-controller-manager are both given here: the API server and
    its authentication and authorization through `kubeconfig`, loopback only on `port`, a
    self-signed serving cert in `cert_dir`, no leader election (one of each)."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        "--leader-elect=false",
    ]


def scheduler_args(binary: Path, directory: Path, kubeconfig: Path, port: int) -> list[str]:
    """kube-scheduler's command line: the shared flags, its serving cert under `directory`."""
    return [*component_args(binary, kubeconfig, port, directory / "kube-scheduler"), "--v=0"]
