"""`spotpool image build`: the operator image from operator/Dockerfile with buildah, skipped when
an image of the same inputs exists (a warm `make test` adds seconds)."""

import os
import shutil
import subprocess
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from spotpool.image.base import python_base
from spotpool.image.context import (
    DOCKERFILE,
    INPUTS_LABEL,
    context_files,
    git_revision,
    inputs_hash,
    stage_context,
    stage_tools,
)
from spotpool.image.host import Say, ensure_tools
from spotpool.image.prune import KEEP, prune
from spotpool.toolchain.paths import cache_root

REPOSITORY = "localhost/spotpool-operator"
SOURCE = "https://github.com/spotpool/spotpool"
# The image's budget, in bytes as `podman image inspect` counts them (uncompressed, every layer):
# tests/e2e/test_image_size.py fails the test command past it (docs/deploy.md, "Size").
SIZE_BUDGET = 500_000_000
# Where a proxy's CA usually is; it reaches the build as a secret, never as a layer.
DEFAULT_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


class ImageBuildError(RuntimeError):
    """buildah failed; the message holds the end of its output."""


@dataclass(frozen=True)
class Image:
    reference: str
    inputs: str
    revision: str
    built: bool
    seconds: float


def project_version(root: Path) -> str:
    with (root / "pyproject.toml").open("rb") as file:
        version: str = tomllib.load(file)["project"]["version"]
    return version


def ca_bundle(explicit: Path | None) -> Path | None:
    """The CA file given to the build: --ca, else $SSL_CERT_FILE, else the system bundle."""
    if explicit is not None:
        if not explicit.is_file():
            raise ImageBuildError(f"--ca {explicit}: no such file")
        return explicit
    from_env = os.environ.get("SSL_CERT_FILE")
    for candidate in (Path(from_env) if from_env else None, DEFAULT_CA_BUNDLE):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def image_with_inputs(inputs: str) -> str | None:
    """The id of an image built from these inputs, if one is in local storage."""
    done = subprocess.run(
        ["podman", "images", "-q", "--no-trunc", "--filter", f"label={INPUTS_LABEL}={inputs}"],
        capture_output=True,
        text=True,
    )
    ids = done.stdout.split()
    return ids[0] if done.returncode == 0 and ids else None


def image_size(reference: str) -> int:
    """The image's size in bytes, as `podman image inspect` reports it."""
    done = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Size}}", reference],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout.strip())


def _image_id(reference: str) -> str:
    done = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", reference],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def build(
    root: Path,
    say: Say,
    *,
    ca: Path | None = None,
    local_base: bool = False,
    force: bool = False,
    no_cache: bool = False,
    keep: int = KEEP,
) -> Image:
    """The operator image of the tree at `root`, tagged `REPOSITORY:<version>`: built, or the
    one already built from the same inputs."""
    started = time.monotonic()
    ensure_tools(say)
    base = python_base(say, local_only=local_base)
    version = project_version(root)
    revision = git_revision(root) or "unknown"
    files = context_files(root)
    extra = {"base": _image_id(base), "version": version, "revision": revision}
    inputs = inputs_hash(root, files, extra)
    reference = f"{REPOSITORY}:{version}"
    existing = None if force or no_cache else image_with_inputs(inputs)
    if existing is not None:
        subprocess.run(["podman", "tag", existing, reference], check=True)
        say(f"{reference}: up to date (inputs {inputs[:12]})")
        if keep:
            prune(say, keep, spare=existing)
        return Image(reference, inputs, revision, False, time.monotonic() - started)
    work = cache_root() / "image" / f"build-{inputs[:12]}"
    try:
        stage_context(root, work / "context")
        stage_tools(work / "tools")
        command = [
            "buildah",
            "bud",
            "--isolation",
            "chroot",
            "--layers",
            "-f",
            str(work / "context" / DOCKERFILE),
            "--build-arg",
            f"PYTHON_IMAGE={base}",
            "--build-arg",
            f"VERSION={version}",
            "--build-arg",
            f"REVISION={revision}",
            "--build-arg",
            f"SOURCE={SOURCE}",
            "--build-context",
            f"toolcache={work / 'tools'}",
            "--label",
            f"{INPUTS_LABEL}={inputs}",
            "--tag",
            reference,
            "--tag",
            f"{REPOSITORY}:inputs-{inputs[:12]}",
        ]
        if no_cache:
            command.append("--no-cache")
        if (bundle := ca_bundle(ca)) is not None:
            command += ["--secret", f"id=ca,src={bundle}"]
        say(f"building {reference} from {base} (inputs {inputs[:12]})")
        log = work.parent / f"build-{inputs[:12]}.log"
        with log.open("w") as out:
            done = subprocess.run(
                [*command, str(work / "context")], stdout=out, stderr=subprocess.STDOUT
            )
        if done.returncode != 0:
            tail = log.read_text(errors="replace")[-3000:]
            raise ImageBuildError(f"buildah failed (whole log: {log}):\n{tail}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    seconds = time.monotonic() - started
    size = image_size(reference)
    say(f"{reference} built in {seconds:.0f} s: {size / 1e6:.0f} MB of {SIZE_BUDGET / 1e6:.0f}")
    if keep:
        prune(say, keep, spare=_image_id(reference))
    return Image(reference, inputs, revision, True, seconds)
