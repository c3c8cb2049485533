"""Start and stop etcd + kube-apiserver on loopback, and write a kubeconfig for them.

Only the API server runs: the operator talks to the API, so no kubelet, scheduler or
controller-manager is needed. Access needs a bearer token (no anonymous access); RBAC is on.
"""

import contextlib
import os
import secrets
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from pydantic import BaseModel

from spotpool.toolchain.manifest import TOOLS_BY_NAME
from spotpool.toolchain.paths import tool_dir

READY_TIMEOUT_SECONDS = 90.0
STOP_TIMEOUT_SECONDS = 15.0


class ClusterError(Exception):
    """The local cluster could not be started or reached; the message says what to do."""


class ClusterState(BaseModel):
    """What `up` started, so that `down` stops exactly that."""

    directory: Path
    kubeconfig: Path
    server: str
    etcd_pid: int
    apiserver_pid: int
    etcd_binary: Path
    apiserver_binary: Path


def default_directory() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "spotpool" / "cluster"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _binary(name: str) -> Path:
    path = tool_dir(TOOLS_BY_NAME[name]) / name
    if not path.exists():
        raise ClusterError(f"{name} is not installed: run `spotpool toolchain install {name}`")
    return path


def _write_credentials(pki: Path) -> str:
    pki.mkdir(parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (pki / "sa.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    (pki / "sa.pub").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    token = secrets.token_urlsafe(32)
    tokens = pki / "tokens.csv"
    tokens.write_text(f'{token},admin,admin,"system:masters"\n')
    for secret_file in (pki / "sa.key", tokens):
        secret_file.chmod(0o600)
    return token


def _spawn(args: list[str], log: Path, tie_to_parent: bool) -> subprocess.Popen[bytes]:
    def die_with_parent() -> None:
        # Linux PR_SET_PDEATHSIG: a test run that dies takes its servers with it.
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)

    with log.open("ab") as out:
        return subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=not tie_to_parent,
            preexec_fn=die_with_parent if tie_to_parent else None,
        )


def _wait_ready(
    server: str,
    token: str,
    ca: Path,
    processes: dict[str, subprocess.Popen[bytes]],
    directory: Path,
) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    last = "no answer yet"
    while time.monotonic() < deadline:
        for name, proc in processes.items():
            if proc.poll() is not None:
                raise ClusterError(
                    f"{name} exited with {proc.returncode}: see {directory}/{name}.log"
                )
        try:
            context = ssl.create_default_context(cafile=str(ca)) if ca.exists() else None
            request = urllib.request.Request(
                f"{server}/readyz", headers={"Authorization": f"Bearer {token}"}
            )
            with urllib.request.urlopen(request, timeout=2, context=context) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError, ssl.SSLError) as err:
            last = str(err)
        time.sleep(0.3)
    raise ClusterError(
        f"kube-apiserver not ready after {READY_TIMEOUT_SECONDS:.0f}s ({last}); "
        f"see {directory}/kube-apiserver.log"
    )


def up(directory: Path, tie_to_parent: bool = False) -> ClusterState:
    """Start a fresh control plane in `directory`; return what was started."""
    if (directory / "cluster.json").exists() and is_running(load_state(directory)):
        raise ClusterError(
            f"a cluster is already running in {directory}: `spotpool cluster down` first"
        )
    etcd, apiserver = _binary("etcd"), _binary("kube-apiserver")
    directory.mkdir(parents=True, exist_ok=True)
    pki = directory / "pki"
    token = _write_credentials(pki)
    client_port, peer_port, api_port = _free_port(), _free_port(), _free_port()
    etcd_url = f"http://127.0.0.1:{client_port}"
    peer_url = f"http://127.0.0.1:{peer_port}"
    etcd_proc = _spawn(
        [
            str(etcd),
            "--name=spotpool",
            f"--data-dir={directory / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=spotpool={peer_url}",
            "--log-level=warn",
            "--quota-backend-bytes=1073741824",
        ],
        directory / "etcd.log",
        tie_to_parent,
    )
    api_proc = _spawn(
        [
            str(apiserver),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={api_port}",
            f"--etcd-servers={etcd_url}",
            f"--cert-dir={pki}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--anonymous-auth=false",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--v=0",
        ],
        directory / "kube-apiserver.log",
        tie_to_parent,
    )
    server = f"https://127.0.0.1:{api_port}"
    state = ClusterState(
        directory=directory,
        kubeconfig=directory / "kubeconfig",
        server=server,
        etcd_pid=etcd_proc.pid,
        apiserver_pid=api_proc.pid,
        etcd_binary=etcd,
        apiserver_binary=apiserver,
    )
    (directory / "cluster.json").write_text(state.model_dump_json(indent=2))
    try:
        _wait_ready(
            server,
            token,
            pki / "apiserver.crt",
            {"etcd": etcd_proc, "kube-apiserver": api_proc},
            directory,
        )
    except ClusterError:
        down(directory)
        raise
    _write_kubeconfig(state, token, pki / "apiserver.crt")
    return state


def _write_kubeconfig(state: ClusterState, token: str, ca: Path) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "spotpool-local",
                "cluster": {"server": state.server, "certificate-authority": str(ca)},
            }
        ],
        "users": [{"name": "spotpool-admin", "user": {"token": token}}],
        "contexts": [
            {
                "name": "spotpool-local",
                "context": {"cluster": "spotpool-local", "user": "spotpool-admin"},
            }
        ],
        "current-context": "spotpool-local",
    }
    state.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
    state.kubeconfig.chmod(0o600)


def load_state(directory: Path) -> ClusterState:
    path = directory / "cluster.json"
    if not path.exists():
        raise ClusterError(f"no cluster was started in {directory}")
    return ClusterState.model_validate_json(path.read_text())


def _is_ours(pid: int, binary: Path) -> bool:
    """The pid is alive and still runs the binary we started (pids get reused)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return Path(exe.removesuffix(" (deleted)")) == binary.resolve()


def is_running(state: ClusterState) -> bool:
    return _is_ours(state.etcd_pid, state.etcd_binary) or _is_ours(
        state.apiserver_pid, state.apiserver_binary
    )


def down(directory: Path) -> list[int]:
    """Stop exactly the processes `up` started in `directory`; return the pids stopped."""
    state = load_state(directory)
    stopped: list[int] = []
    # The API server first, so it does not log a storm of etcd errors on its way out.
    for pid, binary in (
        (state.apiserver_pid, state.apiserver_binary),
        (state.etcd_pid, state.etcd_binary),
    ):
        if not _is_ours(pid, binary):
            continue
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        while _is_ours(pid, binary) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.1)
        if _is_ours(pid, binary):
            os.kill(pid, signal.SIGKILL)
        _reap(pid)
        stopped.append(pid)
    (directory / "cluster.json").unlink(missing_ok=True)
    return stopped


def _reap(pid: int) -> None:
    """Collect a child that already exited, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
