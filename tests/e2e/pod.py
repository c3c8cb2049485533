"""`spotpool operator run` as its pod would run it, without a kubelet or an image.

- the environment is the rendered Deployment's, with its volume paths moved under a temporary
  directory and its ports on loopback;
- the image's layout (operator/Dockerfile): the pinned `pulumi` in `$SPOTPOOL_CACHE_DIR/bin`,
  an empty `PULUMI_HOME` into which operator/entrypoint.sh links the plugins, no resource
  plugin on PATH, plugin downloads off;
- the Kubernetes identity is the install's service account (a TokenRequest token).
"""

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spotpool.ports import free_port
from spotpool.toolchain.paths import bin_dir, pulumi_home
from tests.e2e.installs import ROOT

ENTRYPOINT = ROOT / "operator" / "entrypoint.sh"
VOLUMES = ("/var/lib/spotpool", "/etc/spotpool")


def environment(deployment: dict[str, Any], kubeconfig: Path, root: Path) -> dict[str, str]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env: dict[str, str] = {}
    for item in container["env"]:
        value = str(item["value"])
        for volume in VOLUMES:
            value = value.replace(volume, f"{root}{volume}")
        env[item["name"]] = value
    pulumi = root / "opt" / "spotpool"
    (pulumi / "bin").mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        (pulumi / "bin" / "pulumi").symlink_to(bin_dir() / "pulumi")
    path = [p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != bin_dir()]
    env.update(
        {
            "HOME": str(root / "home"),
            "SPOTPOOL_METRICS_HOST": "127.0.0.1",
            "SPOTPOOL_METRICS_PORT": str(free_port()),
            "SPOTPOOL_LIVENESS_PORT": str(free_port()),
            "SPOTPOOL_LOG_FORMAT": "full",
            "KUBECONFIG": str(kubeconfig),
            # as operator/Dockerfile sets them:
            "PATH": os.pathsep.join([str(ROOT / ".venv" / "bin"), str(pulumi / "bin"), *path]),
            "SPOTPOOL_CACHE_DIR": str(pulumi),
            "SPOTPOOL_PLUGINS": str(pulumi_home() / "plugins"),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    for directory in ("home", "var/lib/spotpool/state", "var/lib/spotpool/work"):
        (root / directory).mkdir(parents=True, exist_ok=True)
    return env


def write_passphrase(env: dict[str, str], passphrase: str) -> None:
    """What the kubelet does with the passphrase Secret's volume."""
    path = Path(env["SPOTPOOL_PASSPHRASE_FILE"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(passphrase)
    path.chmod(0o440)


@contextlib.contextmanager
def operator(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The operator through the image's entry point; stopped with SIGTERM, as a pod is."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["sh", str(ENTRYPOINT), "operator", "run"],
            env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
        )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{env['SPOTPOOL_LIVENESS_PORT']}/healthz"
        deadline = time.monotonic() + 60
        while not _answers(url):
            assert process.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "no answer on the liveness endpoint"
            time.sleep(0.5)
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:  # its group: the engine and plugins too
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False
