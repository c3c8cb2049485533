"""Install each pinned tool from the first source that has it, and report what is there.

Sources, in order: the cache → already on PATH at the pinned version → the official
download (short timeout) → a build from the Go module proxy → a build from a local source
folder (`--local-source`, `$SPOTPOOL_LOCAL_SOURCE`: an offline mirror of refused modules).
"""

import io
import json
import mmap
import os
import shutil
import subprocess
import tarfile
import urllib.request
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from spotpool.toolchain import gobuild
from spotpool.toolchain.gobuild import ToolUnavailable
from spotpool.toolchain.manifest import TOOLS_BY_NAME, Tool
from spotpool.toolchain.paths import bin_dir, build_dir, pulumi_home, tool_dir

DOWNLOAD_TIMEOUT_SECONDS = 5.0
LOCAL_SOURCE_ENV = "SPOTPOOL_LOCAL_SOURCE"

# The sources, by the names the install records and the status show.
CACHE, ON_PATH, DOWNLOAD, GO_PROXY, LOCAL_SOURCE = (
    "cache",
    "PATH",
    "download",
    "Go module proxy",
    "local source",
)
BUILT = (GO_PROXY, LOCAL_SOURCE)
_LEGACY_NAMES = {"go build": GO_PROXY}  # records written before the sources were named so


class InstallRecord(BaseModel):
    """Kept beside the binary: how it got there, for the status and the build figures."""

    name: str
    version: str
    source: str
    seconds: float = 0.0
    peak_rss_mib: float | None = None


class ToolStatus(BaseModel):
    name: str
    version: str
    path: Path
    ok: bool
    detail: str
    source: str | None = Field(None, description="where the installed binary came from")


def source_order(tool: Tool) -> list[str]:
    """The sources tried for `tool`, first to last. A tool built with source patches comes only
    from our build: the published binary (downloaded, or on PATH) lacks what they change."""
    if tool.build and tool.build.patches:
        return [CACHE, GO_PROXY]
    order = [CACHE, ON_PATH]
    if tool.download_url:
        order.append(DOWNLOAD)
    if tool.build:
        order.append(GO_PROXY)
    if tool.local_source:
        order.append(LOCAL_SOURCE)
    return order


def read_record(tool: Tool) -> InstallRecord | None:
    path = tool_dir(tool) / "install.json"
    if not path.exists():
        return None
    record = InstallRecord.model_validate_json(path.read_text())
    record.source = _LEGACY_NAMES.get(record.source, record.source)
    return record


def _reports_version(binary: Path, tool: Tool) -> bool:
    if tool.version_in_build_info is not None:
        return _build_info_holds(binary, tool.version_in_build_info.encode())
    try:
        out = subprocess.run(
            [str(binary), *tool.version_args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return tool.version in (out.stdout + out.stderr)


def _build_info_holds(binary: Path, marker: bytes) -> bool:
    try:
        with binary.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return m.find(b"-ldflags=") >= 0 and m.find(marker) >= 0
    except (OSError, ValueError):
        return False


def _plugin_dir(tool: Tool) -> Path | None:
    if tool.plugin is None:
        return None
    kind, name = tool.plugin
    return pulumi_home() / "plugins" / f"{kind}-{name}-v{tool.version}"


def status(tool: Tool) -> ToolStatus:
    binary = tool_dir(tool) / tool.binary
    if not binary.exists():
        return ToolStatus(
            name=tool.name, version=tool.version, path=binary, ok=False, detail="missing"
        )
    if not _reports_version(binary, tool):
        return ToolStatus(
            name=tool.name,
            version=tool.version,
            path=binary,
            ok=False,
            detail="does not report the pinned version",
        )
    if tool.beside and not _placed_beside(tool):
        return ToolStatus(
            name=tool.name,
            version=tool.version,
            path=binary,
            ok=False,
            detail=f"built but not beside {tool.beside}",
        )
    plugin_dir = _plugin_dir(tool)
    if plugin_dir is not None and not _same_file(plugin_dir / tool.binary, binary):
        return ToolStatus(
            name=tool.name,
            version=tool.version,
            path=binary,
            ok=False,
            detail="built but not registered with pulumi (or another build is)",
        )
    record = read_record(tool)
    return ToolStatus(
        name=tool.name,
        version=tool.version,
        path=binary,
        ok=True,
        detail="ok",
        source=record.source if record else None,
    )


def _from_path(tool: Tool, dest: Path) -> bool:
    found = shutil.which(tool.binary)
    if found is None or Path(found).resolve().parent == bin_dir().resolve():
        return False
    if not _reports_version(Path(found), tool):
        return False
    shutil.copy2(found, dest)
    return True


def _download(tool: Tool, dest: Path) -> None:
    assert tool.download_url is not None
    try:
        with urllib.request.urlopen(tool.download_url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as resp:
            payload = resp.read()
    except OSError as err:
        raise ToolUnavailable(f"download failed: {err}") from err
    if tool.download_member is None:
        dest.write_bytes(payload)
    else:
        with tarfile.open(fileobj=io.BytesIO(payload)) as archive:
            member = archive.extractfile(tool.download_member)
            if member is None:
                raise ToolUnavailable(f"{tool.download_member} is not in the download")
            dest.write_bytes(member.read())
    dest.chmod(0o755)


def _register_plugin(tool: Tool, binary: Path) -> None:
    if tool.plugin is None:
        return
    pulumi = bin_dir() / "pulumi"
    if not pulumi.exists():
        raise ToolUnavailable("the pulumi CLI is needed to register this plugin, and it is missing")
    kind, name = tool.plugin
    # --file: the engine takes our binary and never tries to download the plugin itself;
    # --reinstall: a new revision of the same version replaces the registered one.
    subprocess.run(
        [
            str(pulumi),
            "plugin",
            "install",
            kind,
            name,
            tool.version,
            "--file",
            str(binary),
            "--reinstall",
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"},
    )


def install(
    tool: Tool, say: Callable[[str], None], local_source: Path | None = None
) -> InstallRecord:
    """Make `tool` present and registered; raise ToolUnavailable with every source's reason.

    `local_source` is the directory of source folders (one per tool, named in the manifest).
    """
    obtained = obtain(tool, say, local_source)
    if obtained.placed:
        return obtained.record
    return place(tool, obtained.record, local_source)


class Obtained(BaseModel):
    record: InstallRecord
    placed: bool = Field(description="already installed and registered: nothing left to do")


def obtain(tool: Tool, say: Callable[[str], None], local_source: Path | None = None) -> Obtained:
    """The binary from the first source that has it. Touches only the tool's own directories,
    so several tools can be obtained at once (their Go builds overlap)."""
    directory = tool_dir(tool)
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / tool.binary
    if status(tool).ok and (kept := read_record(tool)) is not None:
        return Obtained(record=kept, placed=True)
    reasons: list[str] = []
    for source in source_order(tool):
        try:
            record = _try_source(source, tool, binary, say, local_source)
        except ToolUnavailable as err:
            reasons.append(f"{source}: {err}")
            continue
        if record is not None:
            return Obtained(record=record, placed=False)
    raise ToolUnavailable("; ".join(reasons) or "no source configured")


def place(tool: Tool, record: InstallRecord, local_source: Path | None = None) -> InstallRecord:
    """Extra files, the links on PATH, the plugin registration (needs the pulumi CLI placed
    first) and the record: done one tool at a time, in the manifest's order."""
    directory = tool_dir(tool)
    folder = _local_folder(tool, local_source) if record.source == LOCAL_SOURCE else None
    for filename, (module, version, path) in tool.extra_files.items():
        extra = directory / filename
        if folder is not None and (folder / filename).is_file():
            extra.write_bytes((folder / filename).read_bytes())  # offline: from the folder
        else:
            extra.write_bytes(gobuild.module_file(module, version, path, build_dir(tool)))
        extra.chmod(0o755)
    link_into_bin(tool)
    _register_plugin(tool, directory / tool.binary)
    (directory / "install.json").write_text(json.dumps(record.model_dump(), indent=2))
    return record


def _local_folder(tool: Tool, local_source: Path | None) -> Path:
    assert tool.local_source is not None
    if local_source is None:
        raise ToolUnavailable(
            f"no local source directory given (--local-source or ${LOCAL_SOURCE_ENV}) "
            f"to build it from its folder {tool.local_source.folder}"
        )
    folder = local_source / tool.local_source.folder
    if not folder.is_dir():
        raise ToolUnavailable(f"{folder} does not exist")
    return folder


def _try_source(
    source: str,
    tool: Tool,
    binary: Path,
    say: Callable[[str], None],
    local_source: Path | None,
) -> InstallRecord | None:
    """Install `tool` from one source: a record, None (nothing there), or ToolUnavailable."""

    def record(seconds: float = 0.0, peak: float | None = None) -> InstallRecord:
        return InstallRecord(
            name=tool.name, version=tool.version, source=source, seconds=seconds, peak_rss_mib=peak
        )

    if source == CACHE:  # keeps saying where it came from when only the placing was undone
        if not (binary.exists() and _reports_version(binary, tool)):
            return None
        return read_record(tool) or record()
    if source == ON_PATH:
        return record() if _from_path(tool, binary) else None
    if source == DOWNLOAD:
        say(f"{tool.name}: trying the official download")
        _download(tool, binary)
        return record()
    if source == GO_PROXY:
        assert tool.build is not None
        say(f"{tool.name}: building {tool.build.package} from the Go module proxy")
        report = gobuild.build(tool.build, build_dir(tool), binary)
        return record(report.seconds, report.peak_rss_mib)
    if source == LOCAL_SOURCE:
        assert tool.local_source is not None
        folder = _local_folder(tool, local_source)
        say(f"{tool.name}: building from the local source {folder}")
        workdir = build_dir(tool).with_name(build_dir(tool).name + "-local")
        report = gobuild.build_local(folder, tool.local_source, workdir, binary)
        return record(report.seconds, report.peak_rss_mib)
    raise AssertionError(f"unknown source {source}")


def _beside_dir(tool: Tool) -> Path:
    assert tool.beside is not None
    return tool_dir(TOOLS_BY_NAME[tool.beside])


def _same_file(placed: Path, original: Path) -> bool:
    """A hard link or a copy of `original`. Two builds of a tool can have the same size; a Go
    binary's build ID (a hash of its inputs) sits in its first page."""
    if not placed.exists() or placed.stat().st_size != original.stat().st_size:
        return False
    with placed.open("rb") as one, original.open("rb") as other:
        return one.read(4096) == other.read(4096)


def _placed_beside(tool: Tool) -> bool:
    return all(
        _same_file(_beside_dir(tool) / name, tool_dir(tool) / name)
        for name in [tool.binary, *tool.extra_files]
    )


def link_into_bin(tool: Tool) -> None:
    bin_dir().mkdir(parents=True, exist_ok=True)
    directory = tool_dir(tool)
    if tool.beside:
        # Hard links (same cache): a symlink would resolve out of the other tool's directory.
        beside = _beside_dir(tool)
        beside.mkdir(parents=True, exist_ok=True)
        for name in [tool.binary, *tool.extra_files]:
            (beside / name).unlink(missing_ok=True)
            try:
                os.link(directory / name, beside / name)
            except OSError:
                shutil.copy2(directory / name, beside / name)
        directory = beside
    for name in [tool.binary, *tool.extra_files]:
        link = bin_dir() / name
        link.unlink(missing_ok=True)
        link.symlink_to(directory / name)
