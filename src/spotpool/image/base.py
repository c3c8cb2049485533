"""The base images the Dockerfile builds on (its PYTHON_IMAGE build argument): the official
Python image where a registry answers, else a Debian bookworm made here with debootstrap (the
same Python minor as the project), imported once and reused by every later build."""

import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from spotpool.image.host import Say, image_exists
from spotpool.toolchain.paths import cache_root

REGISTRY_PYTHON_IMAGE = "docker.io/library/python:3.11-slim-bookworm"
LOCAL_PYTHON_IMAGE = "localhost/spotpool-base:bookworm-python3.11"
SUITE = "bookworm"
PACKAGES = ["python3", "python3-venv", "ca-certificates"]
DEFAULT_MIRROR = "http://deb.debian.org/debian"
PROBE_TIMEOUT_SECONDS = 5.0


class BaseImageError(RuntimeError):
    """No base image could be had."""


def registry_answers(url: str = "https://registry-1.docker.io/v2/") -> bool:
    """Any HTTP answer counts (the registry says 401 to an anonymous probe)."""
    try:
        urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_SECONDS).close()
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


def python_base(say: Say, *, local_only: bool = False) -> str:
    """The reference of a Python 3.11 bookworm base present in local storage."""
    for reference in (REGISTRY_PYTHON_IMAGE, LOCAL_PYTHON_IMAGE):
        if image_exists(reference):
            return reference
    if not local_only and registry_answers():
        say(f"pulling {REGISTRY_PYTHON_IMAGE}")
        if subprocess.run(["podman", "pull", "-q", REGISTRY_PYTHON_IMAGE]).returncode == 0:
            return REGISTRY_PYTHON_IMAGE
        say("the pull failed: making the base here instead")
    make_local_base(say)
    return LOCAL_PYTHON_IMAGE


def apt_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian mirror this machine's apt uses (one-line or deb822 sources), so the base
    is fetched from wherever apt already works."""
    files = [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*"))]
    for path in files:
        if not path.is_file():
            continue
        for raw in path.read_text(errors="replace").splitlines():
            line = raw.strip()
            words = line.split()
            if line.startswith("URIs:"):
                candidates = words[1:]
            elif words[:1] == ["deb"]:
                candidates = [w for w in words[1:] if "://" in w][:1]
            else:
                continue
            for uri in candidates:
                if uri.rstrip("/").endswith("/debian"):
                    return uri.rstrip("/")
    return DEFAULT_MIRROR


def make_local_base(say: Say) -> None:
    """debootstrap a minimal bookworm with Python 3.11 and import it as LOCAL_PYTHON_IMAGE."""
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise BaseImageError("debootstrap is missing (apt-get install debootstrap)")
    mirror = apt_mirror()
    work = cache_root() / "image"
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work, prefix="rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        say(f"debootstrap {SUITE} from {mirror} (about two minutes, once)")
        done = subprocess.run(
            [
                debootstrap,
                "--variant=minbase",
                f"--include={','.join(PACKAGES)}",
                SUITE,
                str(rootfs),
                mirror,
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise BaseImageError(f"debootstrap failed:\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
        if not (rootfs / "usr/bin/python3.11").exists():
            raise BaseImageError(f"{SUITE}'s python3 is not 3.11: the base would not match")
        # What a container image leaves out: package lists and caches.
        for leftover in ("var/lib/apt/lists", "var/cache/apt/archives"):
            shutil.rmtree(rootfs / leftover, ignore_errors=True)
            (rootfs / leftover).mkdir(parents=True, exist_ok=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            [
                "podman",
                "import",
                "--change",
                'CMD ["/bin/bash"]',
                "--change",
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "-",
                LOCAL_PYTHON_IMAGE,
            ],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
        )
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise BaseImageError(f"podman import failed: {imported.stderr[-1500:]}")
    say(f"base image {LOCAL_PYTHON_IMAGE} made")
