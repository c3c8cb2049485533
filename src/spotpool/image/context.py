"""What goes into the operator image: the build context (the same paths as
operator/Dockerfile.dockerignore lets through), the pinned tools, and one hash of them all that
names the build's inputs."""

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from spotpool.toolchain.manifest import TOOLS_BY_NAME, Tool
from spotpool.toolchain.paths import pulumi_home, tool_dir

DOCKERFILE = Path("operator/Dockerfile")
DOCKERIGNORE = Path("operator/Dockerfile.dockerignore")
INPUTS_LABEL = "io.spotpool.image.inputs"  # on each image: the hash of what it was built from
# The files and folders the Dockerfile copies (a folder: every file under it).
CONTEXT_PATHS = (
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "Pulumi.yaml",
    "src",
    "stacks",
    "operator/spotpool_operator",
    "operator/deploy/spotpool_deploy",
    "operator/entrypoint.sh",
)
SKIPPED = ("__pycache__", ".mypy_cache", ".pytest_cache")
# The pinned tools in the image: the CLI and the one resource plugin the stack program uses.
# No language host: the engine runs the stack program inline (engine/runs/program.py).
IMAGE_TOOLS = ("pulumi", "pulumi-resource-tencentcloud")


class ContextError(RuntimeError):
    """Something the image is built from is missing."""


def context_files(root: Path) -> list[Path]:
    """Every file of the build context, relative to `root`, sorted."""
    files: list[Path] = []
    for name in CONTEXT_PATHS:
        path = root / name
        if path.is_file():
            files.append(Path(name))
        elif path.is_dir():
            for found in path.rglob("*"):
                parts = found.relative_to(root).parts
                skipped = any(p in SKIPPED for p in parts) or found.suffix == ".pyc"
                if found.is_file() and not skipped:
                    files.append(found.relative_to(root))
        else:
            raise ContextError(f"{path} is missing: the image is built from it")
    return sorted(files)


def stage_context(root: Path, into: Path) -> list[Path]:
    """A copy of the build context in `into` (buildah sends exactly what is there)."""
    shutil.rmtree(into, ignore_errors=True)
    files = context_files(root)
    for name in [*files, DOCKERFILE]:
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, into / name)
    return files


def stage_tools(into: Path) -> None:
    """The pinned tools as the image lays them out: bin/ (the CLI; real files, not the cache's
    links) and plugins/ (the registered plugin folder, so
    Pulumi finds it where it looks and never downloads one)."""
    shutil.rmtree(into, ignore_errors=True)
    (into / "bin").mkdir(parents=True)
    (into / "plugins").mkdir()
    for name in IMAGE_TOOLS:
        tool = TOOLS_BY_NAME[name]
        if tool.plugin is None:
            for filename in [tool.binary, *tool.extra_files]:
                _link_or_copy(_tool_file(tool, filename), into / "bin" / filename)
            continue
        kind, plugin = tool.plugin
        folder = pulumi_home() / "plugins" / f"{kind}-{plugin}-v{tool.version}"
        binary = folder / tool.binary
        if not binary.is_file():
            raise ContextError(
                f"{binary} is missing: run `spotpool toolchain install {tool.name}` first"
            )
        (into / "plugins" / folder.name).mkdir()
        _link_or_copy(binary, into / "plugins" / folder.name / tool.binary)


def _tool_file(tool: Tool, filename: str) -> Path:
    path = tool_dir(tool) / filename
    if not path.is_file():
        raise ContextError(f"{path} is missing: run `spotpool toolchain install {tool.name}` first")
    return path


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source.resolve(), target)
    except OSError:  # another filesystem
        shutil.copy2(source, target)
    target.chmod(0o755)


def inputs_hash(root: Path, files: list[Path], extra: dict[str, str]) -> str:
    """sha256 over the Dockerfile, every context file (path and bytes), the tool versions and
    `extra` (base image id, version, revision): equal hashes, equal images."""
    digest = hashlib.sha256()
    for path in [DOCKERFILE, *files]:
        digest.update(f"{path}\0".encode())
        digest.update(hashlib.sha256((root / path).read_bytes()).digest())
    for name in IMAGE_TOOLS:
        tool = TOOLS_BY_NAME[name]
        digest.update(f"{tool.name}={tool.version}-{tool.revision or ''}\0".encode())
    for key in sorted(extra):
        digest.update(f"{key}={extra[key]}\0".encode())
    return digest.hexdigest()


def git_revision(root: Path) -> str | None:
    """The commit the tree is at, `-dirty` when the image's files differ from it; None outside
    a git checkout."""
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True
    )
    if done.returncode != 0:
        return None
    revision = done.stdout.strip()
    changed = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--", *CONTEXT_PATHS, str(DOCKERFILE)],
        capture_output=True,
        text=True,
    )
    return f"{revision}-dirty" if changed.stdout.strip() else revision
