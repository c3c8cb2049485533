"""The toolchain's sources, in order: cache, PATH, official download, Go module proxy, local
source. Real installs of a tiny tool into a throwaway cache: a Go program in a local source
folder, a script served over loopback HTTP, a script on PATH."""

import http.server
import re
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotpool.toolchain import gobuild
from spotpool.toolchain.gobuild import ToolUnavailable
from spotpool.toolchain.install import (
    CACHE,
    DOWNLOAD,
    GO_PROXY,
    LOCAL_SOURCE,
    ON_PATH,
    install,
    source_order,
    status,
)
from spotpool.toolchain.manifest import TOOLS_BY_NAME, LocalSource, Tool
from spotpool.toolchain.paths import bin_dir, tool_dir

pytestmark = pytest.mark.unit

HELLO_GO = """package main

import "fmt"

var version = "dev"

func main() { fmt.Println("hello", version) }
"""
SCRIPT = "#!/bin/sh\necho hello 1.2.3\n"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tool(download_url: str) -> Tool:
    return Tool(
        name="hello",
        version="1.2.3",
        binary="hello",
        version_args=["--version"],
        download_url=download_url,
        local_source=LocalSource(folder="hello-1.2.3", ldflags=["-X main.version=1.2.3"]),
        extra_files={"hello-exec": ("example.com/unused", "v0.0.0", "unused")},
    )


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPOTPOOL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    """A local source directory with one read-only tool folder, as /work/shared/upstream."""
    folder = tmp_path / "mirror" / "hello-1.2.3"
    folder.mkdir(parents=True)
    (folder / "go.mod").write_text("module example.com/hello\n\ngo 1.24\n")
    (folder / "main.go").write_text(HELLO_GO)
    (folder / "hello-exec").write_text("#!/bin/sh\n")
    for path in (*folder.iterdir(), folder):
        path.chmod(stat.S_IRUSR | stat.S_IXUSR)
    return tmp_path / "mirror"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """The official download, stood in for by a loopback HTTP server."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "hello").write_text(SCRIPT)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hello"
    finally:
        server.shutdown()
        server.server_close()


def test_the_order_is_cache_path_download_go_proxy_local_source() -> None:
    for name in ("pulumi-language-python", "pulumi-resource-kubernetes"):
        assert source_order(TOOLS_BY_NAME[name]) == [
            CACHE, ON_PATH, DOWNLOAD, GO_PROXY, LOCAL_SOURCE,
        ]  # fmt: skip
    assert source_order(TOOLS_BY_NAME["kube-controller-manager"]) == [
        CACHE, ON_PATH, DOWNLOAD, GO_PROXY,
    ]  # fmt: skip
    # Built with a source patch (X-TC-Action signed): never the published binary.
    assert source_order(TOOLS_BY_NAME["pulumi-resource-tencentcloud"]) == [CACHE, GO_PROXY]


def test_a_source_patch_applies_exactly_once_to_the_published_module() -> None:
    """The patch's text is found once in the module the build downloads (a new release that
    moved the line fails the build, it is never built unpatched)."""
    (patch,) = TOOLS_BY_NAME["pulumi-resource-tencentcloud"].build.patches  # type: ignore[union-attr]
    workdir = Path(tempfile.mkdtemp())
    try:
        found = gobuild._download_module(patch.module, patch.version, workdir)
        text = (Path(found["Dir"]) / patch.file).read_text()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    assert text.count(patch.old) == 1
    assert "x-tc-action" in patch.new and "x-tc-action" not in patch.old


def test_the_local_source_builds_when_every_other_source_fails(cache: Path, mirror: Path) -> None:
    tool = _tool(f"http://127.0.0.1:{_closed_port()}/hello")
    said: list[str] = []
    record = install(tool, said.append, mirror)
    assert record.source == LOCAL_SOURCE and (record.peak_rss_mib or 0) > 0  # the build's report
    assert any("trying the official download" in line for line in said)
    state = status(tool)
    assert state.ok and state.source == LOCAL_SOURCE
    # The shim came from the folder (no module download), executable, beside the binary.
    shim = tool_dir(tool) / "hello-exec"
    assert shim.read_text() == "#!/bin/sh\n" and shim.stat().st_mode & stat.S_IXUSR
    assert (bin_dir() / "hello").resolve() == tool_dir(tool) / "hello"
    assert (bin_dir() / "hello-exec").resolve() == shim
    # Installed once: the next install is the cache, and it still says where it came from.
    said.clear()
    assert install(tool, said.append, mirror).source == LOCAL_SOURCE and not said


def test_without_a_local_source_every_reason_is_given(cache: Path) -> None:
    tool = _tool(f"http://127.0.0.1:{_closed_port()}/hello")
    with pytest.raises(ToolUnavailable) as failure:
        install(tool, lambda _: None, None)
    message = str(failure.value)
    assert "download: download failed" in message
    assert "local source: no local source directory given (--local-source" in message
    with pytest.raises(ToolUnavailable, match=re.escape("nowhere/hello-1.2.3 does not exist")):
        install(tool, lambda _: None, cache / "nowhere")


def test_the_download_comes_before_the_local_source(cache: Path, mirror: Path, served: str) -> None:
    tool = _tool(served).model_copy(update={"extra_files": {}})
    assert install(tool, lambda _: None, mirror).source == DOWNLOAD
    assert (tool_dir(tool) / "hello").read_text() == SCRIPT
    assert not (cache / "build").exists()  # nothing was built


def test_path_comes_before_the_download_and_the_cache_before_path(
    cache: Path, mirror: Path, served: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = _tool(served).model_copy(update={"extra_files": {}})
    elsewhere = tmp_path / "usr-local-bin"
    elsewhere.mkdir()
    (elsewhere / "hello").write_text(SCRIPT)
    (elsewhere / "hello").chmod(0o755)
    monkeypatch.setenv("PATH", f"{elsewhere}:/usr/bin:/bin")
    assert install(tool, lambda _: None, mirror).source == ON_PATH

    (tool_dir(tool) / "install.json").unlink()  # a binary in the cache, no record of it
    assert install(tool, lambda _: None, mirror).source == CACHE


def test_a_binary_without_a_version_flag_is_checked_by_its_build_info(
    cache: Path, mirror: Path
) -> None:
    """As the kubernetes plugin: running it starts a server, so its stamped version is read."""
    tool = _tool(f"http://127.0.0.1:{_closed_port()}/hello").model_copy(
        update={"version_args": [], "version_in_build_info": "main.version=1.2.3"}
    )
    assert install(tool, lambda _: None, mirror).source == LOCAL_SOURCE
    assert status(tool).ok
    other = tool.model_copy(update={"version_in_build_info": "main.version=1.2.4"})
    assert status(other).detail == "does not report the pinned version"


def test_a_tool_placed_beside_another_is_put_back_and_keeps_its_source(
    cache: Path, mirror: Path
) -> None:
    """As the language host beside the pulumi CLI: hard links in the CLI's directory, which
    the bin/ links resolve to; undone, the status says so and an install puts them back."""
    tool = _tool(f"http://127.0.0.1:{_closed_port()}/hello").model_copy(update={"beside": "pulumi"})
    install(tool, lambda _: None, mirror)
    cli_dir = tool_dir(TOOLS_BY_NAME["pulumi"])
    for name in ("hello", "hello-exec"):
        assert (cli_dir / name).samefile(tool_dir(tool) / name)
        assert (bin_dir() / name).resolve() == cli_dir / name
    (cli_dir / "hello-exec").unlink()
    assert status(tool).detail == "built but not beside pulumi"
    assert install(tool, lambda _: None, mirror).source == LOCAL_SOURCE
    assert status(tool).ok and (cli_dir / "hello-exec").exists()


def test_a_local_source_that_is_not_a_directory_is_refused_with_what_to_fix(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from spotpool.cli import app

    monkeypatch.setenv("SPOTPOOL_LOCAL_SOURCE", str(tmp_path / "no-such-mirror"))
    monkeypatch.setenv("COLUMNS", "400")  # the error box on one line
    result = CliRunner().invoke(app, ["toolchain", "install", "etcd"])
    assert result.exit_code == 2
    assert "no-such-mirror is not a directory" in result.output
    assert not (cache / "tools").exists()  # nothing was tried


def test_a_revision_is_built_anew_in_a_directory_of_its_own(cache: Path, mirror: Path) -> None:
    """A recipe change under the same version (the lean pulumi CLI and tencentcloud plugin):
    caches holding the earlier build build this one; `bin/` points at it."""
    tool = _tool(f"http://127.0.0.1:{_closed_port()}/hello")
    install(tool, lambda _: None, mirror)
    revised = tool.model_copy(update={"revision": "lean1"})
    assert tool_dir(revised).name == "hello-1.2.3-lean1"
    assert status(revised).detail == "missing"
    record = install(revised, lambda _: None, mirror)
    assert record.source == LOCAL_SOURCE and (record.peak_rss_mib or 0) > 0  # the build's report
    assert (bin_dir() / "hello").resolve() == tool_dir(revised) / "hello"


def test_another_build_of_the_same_size_is_not_the_same_file(tmp_path: Path) -> None:
    from spotpool.toolchain.install import _same_file

    build, other, copy = tmp_path / "build", tmp_path / "other", tmp_path / "copy"
    build.write_bytes(b"\x7fELF build-id A" + bytes(8192))
    other.write_bytes(b"\x7fELF build-id B" + bytes(8192))
    copy.write_bytes(build.read_bytes())
    assert _same_file(copy, build) and not _same_file(other, build)
    assert not _same_file(tmp_path / "missing", build)
