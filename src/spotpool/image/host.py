"""The container tools on this machine: buildah and podman (with runc), from Debian's packages
when missing, and the flags this machine needs to run a container."""

import json
import os
import shutil
import subprocess
from collections.abc import Callable

Say = Callable[[str], None]

# crun (podman's default) refuses hybrid cgroup hierarchies; runc and cgroupfs work on both.
# podman's default ulimits exceed the hard limits of an unprivileged or containerised host.
RUN_FLAGS = [
    "--runtime",
    "runc",
    "--cgroup-manager",
    "cgroupfs",
    "--ulimit",
    "nofile=4096:4096",
    "--ulimit",
    "nproc=4096:4096",
]
# The tools and the Debian packages that hold them; debootstrap makes a base when no registry
# answers.
PACKAGES = {"buildah": "buildah", "podman": "podman", "runc": "runc", "debootstrap": "debootstrap"}


class HostToolsMissing(RuntimeError):
    """The container tools are missing and cannot be installed here."""


def missing_tools() -> list[str]:
    return [tool for tool in PACKAGES if shutil.which(tool) is None]


def ensure_tools(say: Say) -> None:
    """Install whatever of buildah, podman, runc and debootstrap is missing, with apt-get."""
    missing = missing_tools()
    if not missing:
        return
    packages = [PACKAGES[tool] for tool in missing]
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise HostToolsMissing(
            f"missing {', '.join(missing)}: install the packages {' '.join(packages)} "
            "(Debian/Ubuntu: apt-get install, as root)"
        )
    say(f"installing {' '.join(packages)} from the distribution's packages")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in ([apt, "update", "-q"], [apt, "install", "-y", "-q", *packages]):
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise HostToolsMissing(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    if still := missing_tools():
        raise HostToolsMissing(f"still missing after apt-get: {', '.join(still)}")


def image_exists(reference: str) -> bool:
    return (
        subprocess.run(["podman", "image", "exists", reference], capture_output=True).returncode
        == 0
    )


def image_label(reference: str, label: str) -> str | None:
    done = subprocess.run(
        [
            "podman",
            "image",
            "inspect",
            "--format",
            f"{{{{index .Labels {json.dumps(label)}}}}}",
            reference,
        ],
        capture_output=True,
        text=True,
    )
    value = done.stdout.strip()
    return value if done.returncode == 0 and value and value != "<no value>" else None
