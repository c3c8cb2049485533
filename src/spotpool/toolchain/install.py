"""Install each pinned tool from the first source that has it, and report what is there.

Sources, in order: the cache → already on PATH at the pinned version → the official
download (short timeout) → a build from the Go module proxy.
"""

import io
import json
import os
import shutil
import subprocess
import tarfile
import urllib.request
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from spotpool.toolchain import gobuild
from spotpool.toolchain.gobuild import ToolUnavailable
from spotpool.toolchain.manifest import Tool
from spotpool.toolchain.paths import bin_dir, build_dir, pulumi_home, tool_dir

DOWNLOAD_TIMEOUT_SECONDS = 5.0


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


def _reports_version(binary: Path, tool: Tool) -> bool:
    try:
        out = subprocess.run(
            [str(binary), *tool.version_args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return tool.version in (out.stdout + out.stderr)


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
    plugin_dir = _plugin_dir(tool)
    if plugin_dir is not None and not (plugin_dir / tool.binary).exists():
        return ToolStatus(
            name=tool.name,
            version=tool.version,
            path=binary,
            ok=False,
            detail="built but not registered with pulumi",
        )
    return ToolStatus(name=tool.name, version=tool.version, path=binary, ok=True, detail="ok")


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
    # --file: the engine takes our binary and never tries to download the plugin itself.
    subprocess.run(
        [str(pulumi), "plugin", "install", kind, name, tool.version, "--file", str(binary)],
        check=True,
        capture_output=True,
        env={**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"},
    )


def install(tool: Tool, say: Callable[[str], None]) -> InstallRecord:
    """Make `tool` present and registered; raise ToolUnavailable with every source's reason."""
    directory = tool_dir(tool)
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / tool.binary
    record_file = directory / "install.json"
    if status(tool).ok and record_file.exists():
        return InstallRecord.model_validate_json(record_file.read_text())

    record: InstallRecord | None = None
    reasons: list[str] = []
    if binary.exists() and _reports_version(binary, tool):
        record = InstallRecord(name=tool.name, version=tool.version, source="cache")
    elif _from_path(tool, binary):
        record = InstallRecord(name=tool.name, version=tool.version, source="PATH")
    if record is None and tool.download_url:
        say(f"{tool.name}: trying the official download")
        try:
            _download(tool, binary)
            record = InstallRecord(name=tool.name, version=tool.version, source="download")
        except ToolUnavailable as err:
            reasons.append(str(err))
    if record is None and tool.build:
        say(f"{tool.name}: building {tool.build.package} from the Go module proxy")
        try:
            report = gobuild.build(tool.build, build_dir(tool), binary)
            record = InstallRecord(
                name=tool.name,
                version=tool.version,
                source="go build",
                seconds=report.seconds,
                peak_rss_mib=report.peak_rss_mib,
            )
        except ToolUnavailable as err:
            reasons.append(str(err))
    if record is None:
        raise ToolUnavailable("; ".join(reasons) or "no source configured")

    for filename, (module, version, path) in tool.extra_files.items():
        extra = directory / filename
        extra.write_bytes(gobuild.module_file(module, version, path, build_dir(tool)))
        extra.chmod(0o755)
    link_into_bin(tool)
    _register_plugin(tool, binary)
    record_file.write_text(json.dumps(record.model_dump(), indent=2))
    return record


def link_into_bin(tool: Tool) -> None:
    bin_dir().mkdir(parents=True, exist_ok=True)
    directory = tool_dir(tool)
    for name in [tool.binary, *tool.extra_files]:
        link = bin_dir() / name
        link.unlink(missing_ok=True)
        link.symlink_to(directory / name)
