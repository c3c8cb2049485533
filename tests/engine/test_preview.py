"""Previews with the real engine and emulator: right counts, nothing written, readable reports."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import SecretStr

from spotpool.api.status import Changes
from spotpool.engine.runs import config_file
from spotpool.engine.state import config_crypt
from spotpool.preview import manifests, report
from spotpool.preview.run import preview_manifests, preview_stacks
from tests.emulator.harness import SECRET_ID, SECRET_KEY
from tests.engine.conftest import EngineWorld, pool_spec

pytestmark = pytest.mark.integration


def _manifest(directory: Path, name: str, replicas: int, **extra: object) -> Path:
    spec = pool_spec(replicas, **extra).model_dump(mode="json", by_alias=True, exclude_none=True)
    doc = {
        "apiVersion": "devops.jokerbai.com/v1",
        "kind": "Spotpool",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": spec,
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _snapshot(*roots: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for root in roots
        for p in sorted(root.rglob("*"))
        if p.is_file() and "/locks/" not in str(p)
    }


def test_preview_counts_and_leaves_no_trace(world: EngineWorld, tmp_path: Path) -> None:
    stack = world.pool("gpu")
    stack.up(world.config(stack, 2))
    backend = Path(world.settings.backend_url.removeprefix("file://"))
    before = _snapshot(backend, world.settings.work_root)

    files = tmp_path / "manifests"
    files.mkdir()
    same = _manifest(files, "gpu", 2)
    found = manifests.find([same])
    [unchanged] = preview_manifests(found, world.settings, world.credentials)
    assert unchanged.error is None and unchanged.changes is not None
    assert (unchanged.changes.create, unchanged.changes.replace, unchanged.changes.delete) == (
        0,
        0,
        0,
    )
    assert unchanged.changes.update == 0
    assert unchanged.instances == Changes(same=2)

    _manifest(files, "gpu", 4)
    [bigger] = preview_manifests(manifests.find([files]), world.settings, world.credentials)
    assert bigger.changes is not None and bigger.changes.create == 2
    assert bigger.instances == Changes(create=2, same=2)

    _manifest(files, "gpu", 2, instanceTypes=["GN7.5XLARGE80"])
    [other_type] = preview_manifests(manifests.find([files]), world.settings, world.credentials)
    assert other_type.changes is not None and other_type.changes.replace == 2
    assert other_type.instances == Changes(replace=2)

    assert _snapshot(backend, world.settings.work_root) == before
    assert len(world.cloud_instances(stack)) == 2


def test_new_pool_invalid_manifest_and_markdown(world: EngineWorld, tmp_path: Path) -> None:
    stack = world.pool("gpu")
    stack.up(world.config(stack, 1))
    files = tmp_path / "manifests"
    files.mkdir()
    _manifest(files, "gpu", 1)
    _manifest(files, "fresh", 3)
    (files / "broken.yaml").write_text(
        "apiVersion: devops.jokerbai.com/v1\nkind: Spotpool\nmetadata: {name: broken}\n"
        "spec: {region: ap-singapore, minimum: 5, maximum: 2, imageId: img-1, vpcId: DEFAULT,"
        " subnetId: DEFAULT, instanceType: S5.LARGE8, availabilityZone: ap-singapore-2,"
        " credentialsSecretRef: {name: k}}\n"
    )
    previews = preview_manifests(manifests.find([files]), world.settings, world.credentials)
    by_name = {p.name: p for p in previews}
    assert by_name["broken"].error and "minimum" in by_name["broken"].error
    # A new pool: its stack and component are created too, but a reviewer counts instances.
    assert by_name["fresh"].changes is not None and by_name["fresh"].changes.create == 5
    assert by_name["fresh"].instances == Changes(create=3)
    assert by_name["gpu"].changes is not None and by_name["gpu"].changes.create == 0

    markdown = report.to_markdown(previews)
    assert "| pool | stack | instances to create | to update | to replace | to delete |" in markdown
    assert "| `team-a/fresh` | `team-a.fresh` | 3 | 0 | 0 | 0 | changes |" in markdown
    assert "Pulumi resources: 5 to create" in markdown
    assert markdown.count("<details>") == 3
    assert json.loads(report.to_json(previews))["pools"][0].keys() >= {"file", "changes", "error"}
    # the new pool was previewed in a throwaway backend: the real one has no stack for it
    assert not list(Path(world.settings.backend_url[7:]).rglob("team-a.fresh.json"))


def test_all_stacks_mode_and_cli_exit_codes(world: EngineWorld, tmp_path: Path) -> None:
    stack = world.pool("gpu")
    stack.up(world.config(stack, 1))
    [existing] = preview_stacks(world.settings, world.credentials)
    assert existing.stack == stack.name and existing.changes is not None
    assert existing.changes.create == 0 and existing.changes.replace == 0

    files = tmp_path / "manifests"
    files.mkdir()
    _manifest(files, "gpu", 3)
    env = {
        **os.environ,
        "SPOTPOOL_BACKEND_URL": world.settings.backend_url,
        "SPOTPOOL_CLOUD_ENDPOINT": world.emulator.endpoint,
        "SPOTPOOL_WORK_DIR": str(world.settings.work_root),
        "PULUMI_CONFIG_PASSPHRASE": "engine-tests-passphrase",
        "TENCENTCLOUD_SECRET_ID": SECRET_ID,
        "TENCENTCLOUD_SECRET_KEY": SECRET_KEY,
    }
    spotpool = str(Path(sys.executable).parent / "spotpool")
    run = subprocess.run(
        [spotpool, "preview", "-f", str(files), "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2, run.stderr
    [pool] = json.loads(run.stdout)["pools"]
    assert pool["changes"]["create"] == 2 and pool["instances"]["create"] == 2

    # A configuration error is an error (1), never "changes" (2); so is a pool's error.
    keyless = {k: v for k, v in env.items() if not k.startswith("TENCENTCLOUD_")}
    run = subprocess.run([spotpool, "preview", "-f", str(files)], env=keyless,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 1 and "TENCENTCLOUD_SECRET_ID" in run.stderr, run.stderr
    (files / "broken.yaml").write_text(
        "apiVersion: devops.jokerbai.com/v1\nkind: Spotpool\nmetadata: {name: broken}\nspec: {}\n"
    )
    run = subprocess.run([spotpool, "preview", "-f", str(files), "--format", "text"], env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 1 and "ERROR" in run.stdout, run.stdout + run.stderr


def test_settings_another_passphrase_left_do_not_break_a_preview_or_an_up(
    world: EngineWorld, tmp_path: Path
) -> None:
    """The README's world by hand, then another try with another passphrase: the shared work
    dir holds `Pulumi.team-a.gpu.yaml` salted for the first. A preview of the pool (not in
    this backend) and the first `up` of its stack use settings of their own, not that file
    (which made the CLI fail with `incorrect passphrase`)."""
    other = world.settings.model_copy(update={"passphrase": SecretStr("an earlier try's")})
    stale = world.settings.work_root / "team-a.gpu" / "Pulumi.team-a.gpu.yaml"
    config_file.prepare_new_stack(stale, other)
    passphrase = world.settings.passphrase.get_secret_value()
    with pytest.raises(config_crypt.WrongPassphrase):
        config_crypt.key_for(yaml.safe_load(stale.read_text())["encryptionsalt"], passphrase)

    files = tmp_path / "manifests"
    files.mkdir()
    _manifest(files, "gpu", 2)
    [fresh] = preview_manifests(manifests.find([files]), world.settings, world.credentials)
    assert fresh.error is None, fresh.error
    assert fresh.instances == Changes(create=2)

    stack = world.pool("gpu")
    stack.up(world.config(stack, 1))
    assert len(world.cloud_instances(stack)) == 1
    # The pool's own settings now: this passphrase's salt.
    config_crypt.key_for(yaml.safe_load(stale.read_text())["encryptionsalt"], passphrase)
