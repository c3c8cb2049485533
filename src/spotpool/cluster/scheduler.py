"""How the local cluster runs kube-scheduler: its own identity, loopback only, as kubeadm does.

Only the local world's nodes need it (pods bound by the real scheduler, so the real Eviction
API and PodDisruptionBudgets decide where they go); `cluster.local` starts it when asked.
"""

from pathlib import Path

# Bound by RBAC's bootstrap policy (system:kube-scheduler and system:volume-scheduler).
SCHEDULER_USER = "system:kube-scheduler"


def scheduler_args(binary: Path, directory: Path, kubeconfig: Path, port: int) -> list[str]:
    """kube-scheduler's command line: the cluster's API server through `kubeconfig`, a
    self-signed serving cert under `directory`, no leader election (one scheduler)."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={directory / 'kube-scheduler'}",
        "--leader-elect=false",
        "--v=0",
    ]
