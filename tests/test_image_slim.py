"""What the operator image leaves out (src/spotpool/image/slim.py), checked against the code: the
dependencies it installs, the Kubernetes API modules and provider SDK modules it keeps (the
code may call no other), and what slimming removes from a site-packages folder."""

import compileall
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from spotpool.image import slim

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[1]
# What runs in the image: the package, the operator, the stack program.
IMAGE_CODE = [ROOT / "src", ROOT / "operator" / "spotpool_operator", ROOT / "stacks"]


def _sources() -> dict[Path, str]:
    return {
        path: path.read_text()
        for folder in IMAGE_CODE
        for path in folder.rglob("*.py")
        if path.name != "slim.py"
    }


def test_the_image_installs_every_dependency_but_the_install_programs_sdk() -> None:
    pinned = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    installed = slim.requirements(ROOT / "pyproject.toml")
    assert [d for d in pinned if d not in installed] == [
        d for d in pinned if d.startswith("pulumi-kubernetes")
    ]
    assert "kubernetes==37.0.2" in installed and "pulumi==3.259.0" in installed
    # ...and nothing the image runs imports it.
    users = [p for p, text in _sources().items() if re.search(r"\bpulumi_kubernetes\b", text)]
    assert users == []


def test_the_code_calls_only_the_kubernetes_apis_the_image_keeps() -> None:
    called = {
        name
        for text in _sources().values()
        for name in re.findall(r"\b(?:kubernetes\.)?client\.([A-Z]\w*Api)\b", text)
    }
    assert called, "the pattern finds the API classes the code uses"
    assert called <= slim.KUBE_APIS, f"add {sorted(called - slim.KUBE_APIS)} to slim.KUBE_APIS"


def test_the_stack_program_uses_only_the_sdk_modules_the_image_keeps() -> None:
    used = {
        module
        for path in (ROOT / "stacks").rglob("*.py")
        for module in re.findall(r"\btencentcloud\.([a-z_]\w*)\.", path.read_text())
    }
    assert used and used <= slim.SDK_KEPT, sorted(used - slim.SDK_KEPT)


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site-packages"
    files = [
        "pip/__init__.py", "pip-25.3.dist-info/METADATA",
        "setuptools/__init__.py", "pkg_resources/__init__.py", "distutils-precedence.pth",
        "setuptools-80.0.dist-info/METADATA", "debugpy/__init__.py",
        "debugpy-1.8.17.dist-info/METADATA",
        "kubernetes/__init__.py", "kubernetes/aio/client/__init__.py",
        "kubernetes/client/api/__init__.py", "kubernetes/client/api/core_v1_api.py",
        "kubernetes/client/api/coordination_v1_api.py",
        "kubernetes/client/api/custom_objects_api.py", "kubernetes/client/api/apps_v1_api.py",
        "kubernetes/client/models/v1_pod.py", "kubernetes/client/api_client.py",
        "tencentcloud_iac_pulumi/__init__.py", "tencentcloud_iac_pulumi/_utilities.py",
        "tencentcloud_iac_pulumi/instance/instance.py",
        "tencentcloud_iac_pulumi/config/vars.py", "tencentcloud_iac_pulumi/vpc/vpc.py",
        "certifi/cacert.pem", "certifi/tests/test_certify.py", "pydantic/__init__.py",
    ]  # fmt: skip
    for name in files:
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text("x")
    return site


def _left(site: Path) -> set[str]:
    return {str(p.relative_to(site)) for p in site.rglob("*") if p.is_file()}


def test_slimming_keeps_what_the_operator_runs_and_removes_the_rest(tmp_path: Path) -> None:
    site = _site(tmp_path)
    slim.slim(site, keep_pip=True)
    assert {"pip/__init__.py", "pip-25.3.dist-info/METADATA"} <= _left(site)  # for the project
    slim.slim(site)
    assert _left(site) == {
        "kubernetes/__init__.py", "kubernetes/client/api/__init__.py",
        "kubernetes/client/api/core_v1_api.py", "kubernetes/client/api/coordination_v1_api.py",
        "kubernetes/client/api/custom_objects_api.py", "kubernetes/client/models/v1_pod.py",
        "kubernetes/client/api_client.py",
        "tencentcloud_iac_pulumi/__init__.py", "tencentcloud_iac_pulumi/_utilities.py",
        "tencentcloud_iac_pulumi/instance/instance.py", "tencentcloud_iac_pulumi/config/vars.py",
        "tencentcloud_iac_pulumi/vpc/__init__.py",  # an empty package: its lazy import finds it
        "certifi/cacert.pem", "pydantic/__init__.py",
    }  # fmt: skip
    assert (site / "tencentcloud_iac_pulumi/vpc/__init__.py").read_text() == slim.STUB


def test_a_sourceless_module_imports_as_its_source_did(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("NAME = 'pkg'\n")
    (site / "pkg" / "mod.py").write_text("def answer() -> int:\n    return 42\n")
    (site / "pkg" / "data.txt").write_text("kept")
    compileall.compile_dir(site, quiet=1)
    freed = slim.sourceless(site)
    assert freed > 0 and _left(site) == {"pkg/__init__.pyc", "pkg/mod.pyc", "pkg/data.txt"}
    code = "import pkg, pkg.mod; print(pkg.NAME, pkg.mod.answer())"
    done = subprocess.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(site)}, capture_output=True,
        text=True, check=True,
    )  # fmt: skip
    assert done.stdout.split() == ["pkg", "42"]
