"""Start and stop etcd + kube-apiserver + kube-controller-manager on loopback, and write a
kubeconfig for them.

The controller manager makes namespace deletion, garbage collection of owned objects and
service-account tokens behave as in a real cluster. No kubelet runs (the operator only talks to
the API); a kube-scheduler runs when asked (`scheduler=True`, or `start_scheduler` on a running
cluster), for the local world's nodes (localworld/nodes.py). Access needs a bearer token (no
anonymous access); RBAC is on.
"""

import contextlib
import os
import secrets
import signal
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

from spotpool.children import tied_to_parent
from spotpool.cluster.oidc import ISSUER, write_jwks
from spotpool.cluster.scheduler import SCHEDULER_USER, component_args, scheduler_args
from spotpool.ports import free_port
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
    # None in the state of a cluster started before the controller manager was part of it.
    controller_manager_pid: int | None = None
    controller_manager_binary: Path | None = None
    scheduler_pid: int | None = None
    scheduler_binary: Path | None = None


def default_directory() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "spotpool" / "cluster"


def _binary(name: str) -> Path:
    path = tool_dir(TOOLS_BY_NAME[name]) / name
    if not path.exists():
        raise ClusterError(f"{name} is not installed: run `spotpool toolchain install {name}`")
    return path


CONTROLLER_MANAGER_USER = "system:kube-controller-manager"  # bound by RBAC's bootstrap policy


def _write_credentials(pki: Path) -> tuple[str, str, str]:
    """The service-account key pair and the static tokens: the admin's, the controller
    manager's, the scheduler's (the token file is read once, at the API server's start, so the
    scheduler's is there for one started later). Returns the three tokens."""
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
    token, manager_token, scheduler_token = (secrets.token_urlsafe(32) for _ in range(3))
    tokens = pki / "tokens.csv"
    tokens.write_text(
        f'{token},admin,admin,"system:masters"\n'
        f"{manager_token},{CONTROLLER_MANAGER_USER},{CONTROLLER_MANAGER_USER}\n"
        f"{scheduler_token},{SCHEDULER_USER},{SCHEDULER_USER}\n"
    )
    for secret_file in (pki / "sa.key", tokens):
        secret_file.chmod(0o600)
    return token, manager_token, scheduler_token


def _spawn(args: list[str], log: Path, tie_to_parent: bool) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            tied_to_parent(args) if tie_to_parent else args,  # a test run that dies takes them
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=not tie_to_parent,
        )


def _wait_ready(
    name: str,
    url: str,
    token: str | None,
    ca: Path | None,
    processes: dict[str, subprocess.Popen[bytes]],
    directory: Path,
    deadline: float,
) -> None:
    """Until `url` answers 200; a started process that exits fails at once."""
    last = "no answer yet"
    while time.monotonic() < deadline:
        for process_name, proc in processes.items():
            if proc.poll() is not None:
                raise ClusterError(
                    f"{process_name} exited with {proc.returncode}: "
                    f"see {directory}/{process_name}.log"
                )
        try:
            context: ssl.SSLContext | None = None
            if ca is None:  # the controller manager's self-signed serving cert, on loopback
                context = ssl._create_unverified_context()
            elif ca.exists():
                context = ssl.create_default_context(cafile=str(ca))
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            request = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(request, timeout=2, context=context) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError, ssl.SSLError) as err:
            last = str(err)
        time.sleep(0.3)
    raise ClusterError(
        f"{name} not ready after {READY_TIMEOUT_SECONDS:.0f}s ({last}); see {directory}/{name}.log"
    )


def up(directory: Path, tie_to_parent: bool = False, scheduler: bool = False) -> ClusterState:
    """Start a fresh control plane in `directory` (with a kube-scheduler if `scheduler`);
    return what was started."""
    if (directory / "cluster.json").exists() and is_running(load_state(directory)):
        raise ClusterError(
            f"a cluster is already running in {directory}: `spotpool cluster down` first"
        )
    etcd, apiserver = _binary("etcd"), _binary("kube-apiserver")
    controller_manager = _binary("kube-controller-manager")
    directory.mkdir(parents=True, exist_ok=True)
    pki = directory / "pki"
    token, manager_token, scheduler_token = _write_credentials(pki)
    client_port, peer_port, api_port = free_port(), free_port(), free_port()
    manager_port = free_port()
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
            f"--service-account-issuer={ISSUER}",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--v=0",
        ],
        directory / "kube-apiserver.log",
        tie_to_parent,
    )
    server = f"https://127.0.0.1:{api_port}"
    ca = pki / "apiserver.crt"
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
    processes = {"etcd": etcd_proc, "kube-apiserver": api_proc}
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    try:
        _wait_ready("kube-apiserver", f"{server}/readyz", token, ca, processes, directory, deadline)
        # Started once the API server serves: it reads the API server's self-signed cert, and
        # gives up when the API server is not healthy within seconds.
        manager_proc = _start_controller_manager(
            controller_manager, directory, server, manager_token, manager_port, tie_to_parent
        )
        state.controller_manager_pid = manager_proc.pid
        state.controller_manager_binary = controller_manager
        (directory / "cluster.json").write_text(state.model_dump_json(indent=2))
        processes["kube-controller-manager"] = manager_proc
        _wait_ready(
            "kube-controller-manager",
            f"https://127.0.0.1:{manager_port}/healthz",
            None,
            None,
            processes,
            directory,
            deadline,
        )
        scheduler_kubeconfig = directory / "scheduler.kubeconfig"
        _write_kubeconfig(scheduler_kubeconfig, server, scheduler_token, ca, "scheduler")
        if scheduler:
            state = start_scheduler(directory, tie_to_parent, deadline)
    except ClusterError:
        down(directory)
        raise
    _write_kubeconfig(state.kubeconfig, server, token, ca, "admin")
    write_jwks(directory)  # the public keys of its service-account issuer, for a cloud to trust
    return state


def _start_controller_manager(
    binary: Path, directory: Path, server: str, token: str, port: int, tie_to_parent: bool
) -> subprocess.Popen[bytes]:
    """Its own identity (the bootstrap policy's system:kube-controller-manager) and one
    service account per controller, as kubeadm runs it; the token controller signs with the
    key the API server verifies."""
    pki = directory / "pki"
    kubeconfig = directory / "controller-manager.kubeconfig"
    _write_kubeconfig(kubeconfig, server, token, pki / "apiserver.crt", "controller-manager")
    return _spawn(
        [
            *component_args(binary, kubeconfig, port, directory / "controller-manager"),
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'apiserver.crt'}",
            "--v=0",
        ],
        directory / "kube-controller-manager.log",
        tie_to_parent,
    )


def start_scheduler(
    directory: Path, tie_to_parent: bool = False, deadline: float | None = None
) -> ClusterState:
    """A kube-scheduler for the cluster running in `directory` (none started twice); `down`
    and `stop_scheduler` stop it."""
    state = load_state(directory)
    if (
        state.scheduler_pid
        and state.scheduler_binary
        and _is_ours(state.scheduler_pid, state.scheduler_binary)
    ):
        return state
    binary, port = _binary("kube-scheduler"), free_port()
    args = scheduler_args(binary, directory, directory / "scheduler.kubeconfig", port)
    proc = _spawn(args, directory / "kube-scheduler.log", tie_to_parent)
    state.scheduler_pid, state.scheduler_binary = proc.pid, binary
    (directory / "cluster.json").write_text(state.model_dump_json(indent=2))
    deadline = deadline or time.monotonic() + READY_TIMEOUT_SECONDS
    url, started = f"https://127.0.0.1:{port}/healthz", {"kube-scheduler": proc}
    try:
        _wait_ready("kube-scheduler", url, None, None, started, directory, deadline)
    except ClusterError:
        stop_scheduler(directory)
        raise
    return state


def stop_scheduler(directory: Path) -> None:
    """Stop the scheduler `start_scheduler` started, and only it; the cluster runs on."""
    state = load_state(directory)
    if state.scheduler_pid and state.scheduler_binary:
        _stop(state.scheduler_pid, state.scheduler_binary)
    state.scheduler_pid = state.scheduler_binary = None
    (directory / "cluster.json").write_text(state.model_dump_json(indent=2))


def _write_kubeconfig(path: Path, server: str, token: str, ca: Path, user: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "spotpool-local",
                "cluster": {"server": server, "certificate-authority": str(ca)},
            }
        ],
        "users": [{"name": f"spotpool-{user}", "user": {"token": token}}],
        "contexts": [
            {
                "name": "spotpool-local",
                "context": {"cluster": "spotpool-local", "user": f"spotpool-{user}"},
            }
        ],
        "current-context": "spotpool-local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


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


def _started(state: ClusterState) -> list[tuple[int, Path]]:
    """(pid, binary) of each process `up` started, in the order `down` stops them."""
    started = []
    # The scheduler and the controller manager first, then the API server, so none logs a
    # storm of connection errors on its way out.
    if state.scheduler_pid and state.scheduler_binary:
        started.append((state.scheduler_pid, state.scheduler_binary))
    if state.controller_manager_pid and state.controller_manager_binary:
        started.append((state.controller_manager_pid, state.controller_manager_binary))
    started += [(state.apiserver_pid, state.apiserver_binary), (state.etcd_pid, state.etcd_binary)]
    return started


def is_running(state: ClusterState) -> bool:
    return any(_is_ours(pid, binary) for pid, binary in _started(state))


def down(directory: Path) -> list[int]:
    """Stop exactly the processes `up` started in `directory`; return the pids stopped."""
    state = load_state(directory)
    stopped: list[int] = []
    for pid, binary in _started(state):
        if _stop(pid, binary):
            stopped.append(pid)
    (directory / "cluster.json").unlink(missing_ok=True)
    return stopped


def _stop(pid: int, binary: Path) -> bool:
    """SIGTERM, then SIGKILL if it hangs; False when the pid no longer runs `binary`."""
    if not _is_ours(pid, binary):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while _is_ours(pid, binary) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.1)
    if _is_ours(pid, binary):
        os.kill(pid, signal.SIGKILL)
    _reap(pid)
    return True


def _reap(pid: int) -> None:
    """Collect a child that already exited, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
