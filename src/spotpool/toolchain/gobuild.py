"""Build a Go main package from the Go module proxy, through a throwaway wrapper module.

`go install mod@version` refuses modules whose go.mod has replace directives, and local-path
replaces point at directories that are not part of the module download. The wrapper requires
the module, copies its module-path replaces, and points every local-path replace at the
published module of the same release.
"""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from pydantic import BaseModel

from spotpool.toolchain.manifest import GoBuild, LocalSource


class ToolUnavailable(Exception):
    """The tool cannot be had from this source; the message says exactly why."""


class ModuleVersion(BaseModel):
    Path: str
    Version: str = ""


class ReplaceDirective(BaseModel):
    Old: ModuleVersion
    New: ModuleVersion


class GoMod(BaseModel):
    """The parts of `go mod edit -json` the wrapper needs."""

    Go: str = "1.24"
    Require: list[ModuleVersion] | None = None
    Replace: list[ReplaceDirective] | None = None


class BuildReport(BaseModel):
    seconds: float
    peak_rss_mib: float


RECIPES = Path(__file__).parent / "recipes"


def _go_env(checksum_db: bool = True) -> dict[str, str]:
    env = dict(os.environ)
    # Build against the module graph as published, adding go.sum entries as needed.
    env["GOFLAGS"] = (env.get("GOFLAGS", "") + " -mod=mod").strip()
    if not checksum_db:
        env["GOSUMDB"] = "off"
    return env


def _run_go(args: list[str], cwd: Path, checksum_db: bool = True) -> str:
    go = shutil.which("go")
    if go is None:
        raise ToolUnavailable("no `go` on PATH: install Go 1.24 or newer to build the toolchain")
    result = subprocess.run(
        [go, *args],
        cwd=cwd,
        env=_go_env(checksum_db),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip()
        raise ToolUnavailable(f"`go {' '.join(args)}` failed: {detail}")
    return result.stdout


def _download_module(module: str, version: str, workdir: Path) -> dict[str, str]:
    info: dict[str, str] = json.loads(
        _run_go(["mod", "download", "-json", f"{module}@{version}"], workdir)
    )
    if info.get("Error"):
        raise ToolUnavailable(f"go mod download {module}@{version}: {info['Error']}")
    return info


def _module_info(spec: GoBuild, workdir: Path) -> tuple[str, GoMod]:
    """Download the module; return its resolved version and its parsed go.mod."""
    info = json.loads(
        _run_go(
            ["mod", "download", "-json", f"{spec.module}@{spec.version}"],
            workdir,
            spec.checksum_db,
        )
    )
    if info.get("Error"):
        raise ToolUnavailable(f"go mod download {spec.module}@{spec.version}: {info['Error']}")
    gomod = GoMod.model_validate_json(_run_go(["mod", "edit", "-json", info["GoMod"]], workdir))
    return info["Version"], gomod


def wrapper_go_mod(spec: GoBuild, version: str, gomod: GoMod) -> str:
    required = {r.Path: r.Version for r in gomod.Require or []}
    lines = [
        f"module spotpool.local/toolchain/{spec.module.replace('/', '_')}",
        "",
        f"go {gomod.Go}",
        "",
        f"require {spec.module} {version}",
        *(f"require {module} {wanted}" for module, wanted in spec.requires.items()),
        "",
        *(f"replace {old} => {new}" for old, new in spec.replaces.items()),
        *(f"replace {module} => ./{_stub_dir(module)}" for module in spec.stubs),
        *(f"replace {module} => ./{_patched_dir(module)}" for module in _patched(spec)),
    ]
    for replace in gomod.Replace or []:
        old, new = replace.Old, replace.New
        old_at = f"{old.Path} {old.Version}" if old.Version else old.Path
        if old.Path in spec.replaces or old.Path in spec.stubs or old.Path in _patched(spec):
            # the recipe's choice wins
            continue
        if new.Version:  # a module-path replace: keep it as it is
            lines.append(f"replace {old_at} => {new.Path} {new.Version}")
            continue
        if old.Path not in required:  # a local replace of something never built (guards)
            continue
        wanted = required[old.Path]
        if wanted.startswith("v0.0.0") and spec.sibling_version:
            wanted = spec.sibling_version
        lines.append(f"replace {old_at} => {old.Path} {wanted}")
    return "\n".join(lines) + "\n"


def _stub_dir(module: str) -> str:
    return "stubs/" + module.replace("/", "_")


def _write_stubs(spec: GoBuild, workdir: Path) -> None:
    """Each stub: its recipe's Go files under the module path it stands in for."""
    for module, recipe in spec.stubs.items():
        directory = workdir / _stub_dir(module)
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        (directory / "go.mod").write_text(f"module {module}\n\ngo 1.21\n")
        for source in (RECIPES / recipe).glob("*.go"):
            shutil.copy2(source, directory / source.name)


def _patched(spec: GoBuild) -> set[str]:
    return {patch.module for patch in spec.patches}


def _patched_dir(module: str) -> str:
    return "patched/" + module.replace("/", "_")


def _write_patched(spec: GoBuild, workdir: Path) -> None:
    """A writable copy of each patched module, each edit applied exactly once."""
    for module in sorted(_patched(spec)):
        edits = [patch for patch in spec.patches if patch.module == module]
        info = _download_module(module, edits[0].version, workdir)
        directory = workdir / _patched_dir(module)
        shutil.rmtree(directory, ignore_errors=True)
        shutil.copytree(info["Dir"], directory, copy_function=shutil.copyfile)
        for path, _, _ in os.walk(directory):
            Path(path).chmod(0o755)
        for edit in edits:
            target = directory / edit.file
            text = target.read_text()
            if text.count(edit.old) != 1:
                raise ToolUnavailable(
                    f"patch '{edit.why}' does not apply to {module}@{edit.version}/{edit.file}: "
                    "its text was not found exactly once"
                )
            target.write_text(text.replace(edit.old, edit.new))


def _ldflags(recipe: list[str]) -> str:
    # No symbol table or DWARF: the link of the big binaries (the tencentcloud plugin,
    # kube-apiserver) spends much of its time writing them, and nobody debugs these tools here.
    return " ".join(["-s", "-w", *recipe])


def build(spec: GoBuild, workdir: Path, output: Path) -> BuildReport:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "go.mod").unlink(missing_ok=True)
    version, gomod = _module_info(spec, workdir)
    (workdir / "go.mod").write_text(wrapper_go_mod(spec, version, gomod))
    if spec.recipe:
        for source in (RECIPES / spec.recipe).glob("*.go"):
            shutil.copy2(source, workdir / source.name)
    _write_stubs(spec, workdir)
    _write_patched(spec, workdir)
    args = ["build", "-o", str(output)]
    if spec.tags:
        args += ["-tags", ",".join(spec.tags)]
    args += ["-ldflags", _ldflags(spec.ldflags)]
    args.append(spec.package)
    return _timed_go(args, workdir, workdir, spec.package, spec.checksum_db)


def build_local(source: Path, spec: LocalSource, workdir: Path, output: Path) -> BuildReport:
    """`go build` of a tool's source folder, copied first (the folder may be read-only, and
    `-mod=mod` may add go.sum lines)."""
    if not (source / spec.module_dir / "go.mod").exists():
        raise ToolUnavailable(f"no go.mod in {source / spec.module_dir}")
    workdir.mkdir(parents=True, exist_ok=True)
    _run_go(["version"], Path.cwd())  # a clear error when there is no Go
    copy = workdir / "src"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(source, copy, copy_function=shutil.copyfile, symlinks=True)
    for directory, _, _ in os.walk(copy):
        Path(directory).chmod(0o755)
    args = ["build", "-o", str(output), "-ldflags", _ldflags(spec.ldflags)]
    args.append(spec.package)
    return _timed_go(args, copy / spec.module_dir, workdir, spec.package, checksum_db=True)


def _timed_go(
    args: list[str], cwd: Path, workdir: Path, package: str, checksum_db: bool
) -> BuildReport:
    go = shutil.which("go") or "go"
    started = time.monotonic()
    with (workdir / "build.log").open("w") as log:
        proc = subprocess.Popen(
            [go, *args],
            cwd=cwd,
            env=_go_env(checksum_db),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        # wait4 gives this build's own peak memory (its compilers and linker included).
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        tail = (workdir / "build.log").read_text()[-3000:]
        raise ToolUnavailable(f"go build {package} failed (see {workdir}/build.log):\n{tail}")
    return BuildReport(seconds=round(seconds, 1), peak_rss_mib=round(usage.ru_maxrss / 1024, 1))


def module_file(module: str, version: str, path: str, workdir: Path) -> bytes:
    """One file out of a downloaded module (e.g. a script that ships beside a binary)."""
    workdir.mkdir(parents=True, exist_ok=True)
    info = _download_module(module, version, workdir)
    return (Path(info["Dir"]) / path).read_bytes()
