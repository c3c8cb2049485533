"""What the operator image's venv leaves out of its installed dependencies: only what the operator
runs stays (docs/deploy.md, "What the image holds"). Run by operator/Dockerfile in the build,
on its own (standard library only: `python3 slim.py <site-packages>`), before the bytecode is
compiled once; tests/test_image_slim.py checks the rules against an installed venv.

- the installers: pip, setuptools (and pkg_resources), wheel — nothing is installed at run time;
- debugpy: Pulumi's debugger hook, which the operator never starts;
- kubernetes.aio: the asyncio copy of the Kubernetes client (the operator uses the other one),
  and of the client's API modules (loaded lazily, each on first use) all but the three the
  operator calls (`KUBE_APIS`: Leases, Secrets/ConfigMaps/Events, Spotpools); every model
  stays (a response's nested types are looked up by name);
- of the tencentcloud provider's SDK, every service module but `instance` and `config`: the
  provider plugin in the image maps the one resource `tencentcloud:Instance/instance:Instance`
  (the toolchain's lean build), so the stack program can use no other (each left an empty
  package: the SDK's `__init__` declares every one as a lazy import, which must find it);
- test suites shipped inside packages.

The installer compiles nothing (`--no-compile`): the bytecode is compiled once, after this, for
what is left, and then (`--sourceless`) each dependency's module is its bytecode alone, in the
module's own place (`x.pyc` beside where `x.py` was, which Python imports as it would the
source): the operator runs the bytecode, and a traceback through a dependency names its file,
line and function without the line's text. The project's own code keeps its sources.
"""

import re
import shutil
import sys
import tomllib
from pathlib import Path

# Whole distributions the operator never imports: their top-level names (files or folders),
# and their .dist-info folders by distribution name.
DROPPED = {
    "pip": ["pip"],
    "setuptools": ["setuptools", "pkg_resources", "_distutils_hack", "distutils-precedence.pth"],
    "wheel": ["wheel"],
    "debugpy": ["debugpy"],
}
# Folders inside packages the operator never imports.
UNUSED = ["kubernetes/aio"]
# The Kubernetes client's API classes the operator (and the `spotpool` CLI in the image) use:
# tests/test_image_slim.py fails when the code calls another.
KUBE_APIS = {"CoordinationV1Api", "CoreV1Api", "CustomObjectsApi"}
KUBE_API_FOLDER = "kubernetes/client/api"
# The provider SDK: kept whole but for its service modules, of which only these stay.
SDK = "tencentcloud_iac_pulumi"
SDK_KEPT = {"instance", "config"}
TEST_FOLDERS = {"tests"}
STUB = "# Left out of the operator image: its provider plugin maps only instance.Instance.\n"
BYTECODE_TAG = f"cpython-{sys.version_info.major}{sys.version_info.minor}"


def slim(site_packages: Path, keep_pip: bool = False) -> list[Path]:
    """Remove what the operator does not run from `site_packages` (but pip if `keep_pip`: the
    project's own install comes later); the paths removed."""
    removed: list[Path] = []

    def remove(path: Path) -> None:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            return
        removed.append(path)

    for distribution, names in DROPPED.items():
        if keep_pip and distribution == "pip":
            continue
        for name in names:
            remove(site_packages / name)
        for info in site_packages.glob(f"{distribution}-*.dist-info"):
            remove(info)
    for name in UNUSED:
        remove(site_packages / name)
    api = site_packages / KUBE_API_FOLDER
    if api.is_dir():
        kept = {_snake(name) for name in KUBE_APIS}
        for module in api.glob("*_api.py"):
            if module.stem not in kept:
                remove(module)
    sdk = site_packages / SDK
    if sdk.is_dir():
        for module in sdk.iterdir():
            if module.is_dir() and module.name not in SDK_KEPT | {"__pycache__"}:
                remove(module)
                module.mkdir()
                (module / "__init__.py").write_text(STUB)
    for folder in sorted(site_packages.rglob("*"), reverse=True):
        if folder.is_dir() and folder.name in TEST_FOLDERS:
            remove(folder)
    return removed


def sourceless(site_packages: Path) -> int:
    """Each module compiled in `__pycache__` moved to its module's place (`x.pyc`), its source
    removed (but pip's); the bytes removed."""
    freed = 0
    for cache in sorted(site_packages.rglob("__pycache__")):
        if cache.relative_to(site_packages).parts[0] == "pip":
            continue  # it runs its own files by path (the project's install), then it goes
        for compiled in cache.glob(f"*.{BYTECODE_TAG}.pyc"):
            source = cache.parent / (compiled.name.split(".")[0] + ".py")
            if source.is_file():
                freed += source.stat().st_size
                compiled.replace(cache.parent / (source.stem + ".pyc"))
                source.unlink()
        if not any(cache.iterdir()):
            cache.rmdir()
    return freed


def _snake(name: str) -> str:
    """`CoordinationV1Api` -> `coordination_v1_api` (the client's module names)."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def requirements(pyproject: Path) -> list[str]:
    """The project's pinned dependencies less those `[tool.spotpool.image] leave-out` names
    (what the operator never imports: the install program's SDK)."""
    with pyproject.open("rb") as file:
        project = tomllib.load(file)
    out = {_canonical(n) for n in project["tool"]["spotpool"]["image"]["leave-out"]}
    dependencies: list[str] = project["project"]["dependencies"]
    return [d for d in dependencies if _canonical(re.split(r"[=<>~!;\[ ]", d)[0]) not in out]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["--requirements"] and len(args) == 2:
        print("\n".join(requirements(Path(args[1]))))
        return 0
    if args[:1] == ["--sourceless"] and len(args) == 2:
        print(f"slim: {sourceless(Path(args[1])) / 1e6:.0f} MB of sources left for bytecode")
        return 0
    keep_pip = "--keep-pip" in args
    paths = [a for a in args if a != "--keep-pip"]
    if len(paths) != 1:
        print("usage: slim.py [--keep-pip | --sourceless] <site-packages> | --requirements "
              "<pyproject.toml>", file=sys.stderr)  # fmt: skip
        return 2
    removed = slim(Path(paths[0]), keep_pip=keep_pip)
    print(f"slim: removed {len(removed)} paths")
    return 0


if __name__ == "__main__":
    sys.exit(main())
