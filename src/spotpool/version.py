"""What build this is: the package version, the git revision when known, the Python."""

import os
import platform
import subprocess
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

# Set in the image from its build argument REVISION (operator/Dockerfile); a checkout asks git.
REVISION_ENV = "SPOTPOOL_REVISION"


def package_version() -> str:
    try:
        return version("spotpool")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


def revision() -> str | None:
    """The image's baked revision, else the commit of the checkout this code runs from."""
    baked = os.environ.get(REVISION_ENV, "").strip()
    if baked and baked != "unknown":
        return baked
    return _checkout_revision()


@cache
def _checkout_revision() -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(Path(__file__).parent), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def python_version() -> str:
    return platform.python_version()


def describe() -> str:
    """`spotpool 0.1.0 (revision 1a2b3c4d5e6f, Python 3.11.2)`."""
    known = revision()
    where = f"revision {known}" if known else "revision unknown"
    return f"spotpool {package_version()} ({where}, Python {python_version()})"
