"""`spotpool image build` without building: what goes into the image, the inputs hash that
decides whether to build, where the base comes from, and the build secret for a proxy's CA."""

import subprocess
import tomllib
from pathlib import Path

import pytest

from spotpool.image import build as image_build
from spotpool.image.base import apt_mirror
from spotpool.image.context import CONTEXT_PATHS, DOCKERIGNORE, context_files, inputs_hash

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def test_the_dockerignore_sends_exactly_the_context_the_build_hashes() -> None:
    allowed = [
        line[1:].rstrip("/")
        for line in (ROOT / DOCKERIGNORE).read_text().splitlines()
        if line.startswith("!")
    ]
    assert sorted(allowed) == sorted(CONTEXT_PATHS)


def test_every_package_the_project_installs_is_in_the_context_and_copied() -> None:
    """The bug of issue 29: the CLI imports spotpool_deploy, which the image left out."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    dockerfile = (ROOT / "operator" / "Dockerfile").read_text()
    for package in packages:
        assert any(package == p or package.startswith(f"{p}/") for p in CONTEXT_PATHS), package
        copied = [p for p in ("src", package) if f"COPY {p} ./{p}" in dockerfile]
        assert copied, f"operator/Dockerfile copies no {package}"
    # hatchling reads these while installing the project
    for needed in ("README.md", "LICENSE", "Pulumi.yaml"):
        assert needed in CONTEXT_PATHS


def test_the_ca_reaches_the_build_as_a_secret_mount_never_a_copy() -> None:
    dockerfile = (ROOT / "operator" / "Dockerfile").read_text()
    runs_with_network = [
        block
        for block in dockerfile.split("\nRUN ")[1:]
        if "pip install" in block or "apt-get" in block
    ]
    assert runs_with_network
    for block in runs_with_network:
        assert block.startswith("--mount=type=secret,id=ca"), block[:80]
    assert "ca-certificates.crt" not in "".join(
        line for line in dockerfile.splitlines() if line.startswith(("COPY", "ADD"))
    )


def _tree(root: Path) -> Path:
    for name in CONTEXT_PATHS:
        path = root / name
        if "." in Path(name).name or name == "LICENSE":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(name)
        else:
            (path / "module.py").parent.mkdir(parents=True, exist_ok=True)
            (path / "module.py").write_text(name)
    (root / "operator" / "Dockerfile").write_text("FROM scratch\n")
    return root


def test_the_inputs_hash_follows_the_files_and_ignores_bytecode(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    extra = {"base": "sha256:1", "version": "0.1.0", "revision": "abc"}
    first = inputs_hash(root, context_files(root), extra)
    (root / "src" / "__pycache__").mkdir()
    (root / "src" / "__pycache__" / "module.cpython-311.pyc").write_bytes(b"\0")
    assert inputs_hash(root, context_files(root), extra) == first
    (root / "src" / "module.py").write_text("changed")
    changed = inputs_hash(root, context_files(root), extra)
    assert changed != first
    assert inputs_hash(root, context_files(root), {**extra, "base": "sha256:2"}) != changed
    (root / "operator" / "Dockerfile").write_text("FROM scratch\nUSER 1\n")
    assert inputs_hash(root, context_files(root), extra) != changed


def test_a_missing_context_path_says_what_is_missing(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "LICENSE").unlink()
    with pytest.raises(RuntimeError, match="LICENSE is missing"):
        context_files(root)


def test_the_base_comes_from_the_mirror_apt_uses(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm\n"
    )
    assert apt_mirror(tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list").write_text(
        "deb [arch=amd64] https://other.example/debian bookworm main\n"
    )
    assert apt_mirror(tmp_path) == "https://other.example/debian"
    assert apt_mirror(tmp_path / "nowhere") == "http://deb.debian.org/debian"


def test_the_ca_is_the_given_one_or_ssl_cert_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = tmp_path / "proxy-ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    assert image_build.ca_bundle(bundle) == bundle
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    assert image_build.ca_bundle(None) == bundle
    with pytest.raises(image_build.ImageBuildError, match="no such file"):
        image_build.ca_bundle(tmp_path / "missing.pem")


def test_an_image_of_the_same_inputs_is_reused_without_building(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The warm path of `make image`: found by its inputs label, tagged, nothing built."""
    calls: list[list[str]] = []

    def run(command: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        if command[:2] == ["podman", "images"]:
            return subprocess.CompletedProcess(command, 0, "sha256:feed\n", "")
        if command[:3] == ["podman", "image", "inspect"]:
            return subprocess.CompletedProcess(command, 0, "sha256:base\n", "")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(image_build, "ensure_tools", lambda say: None)
    monkeypatch.setattr(image_build, "python_base", lambda say, local_only: "localhost/base")
    monkeypatch.setattr(subprocess, "run", run)
    image = image_build.build(ROOT, lambda line: None, keep=0)
    assert not image.built
    assert image.reference == "localhost/spotpool-operator:0.1.0"
    assert ["podman", "tag", "sha256:feed", image.reference] in calls
    assert not any(c[0] == "buildah" for c in calls)
