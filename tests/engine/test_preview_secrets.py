"""Pull-request previews hold no production secret: the preview job reads a copy of the state
whose secrets are placeholders, and nothing it holds or writes contains an original secret."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from tencentcloud.cvm.v20170312 import models

from spotpool.api import notices
from spotpool.api.stackconfig import StackConfig
from spotpool.emulator.iam import DEFAULT_ACCOUNT
from spotpool.toolchain.paths import bin_dir
from tests.emulator.harness import error_code
from tests.engine.conftest import EngineWorld, pool_spec

pytestmark = pytest.mark.integration

SPOTPOOL = str(Path(sys.executable).parent / "spotpool")
PREVIEW_PASSPHRASE = "preview-only-passphrase"
NOTICE_URL = "http://10.0.0.7:8090"
# The preview's keys: a sub-user whose CAM policy (docs/inspecting-stacks.md) allows Describe*
# and denies reading the instances' user data (their notice tokens).
PREVIEW_ID, PREVIEW_KEY = "AKIDpreviewonly0001", "preview-only-secret-key"
PREVIEW_POLICY = {
    "Allow": ["cvm:Describe*", "vpc:Describe*", "cbs:Describe*", "tag:Describe*"],
    "Deny": ["cvm:DescribeInstancesAttributes"],
}


def _manifest(directory: Path, name: str, user_data: str, **extra: object) -> Path:
    spec = pool_spec(2, userData=user_data, **extra).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    doc = {
        "apiVersion": "devops.jokerbai.com/v1",
        "kind": "Spotpool",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": spec,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SPOTPOOL, *args], env=env, capture_output=True, text=True, timeout=600)


def _files_text(root: Path) -> str:
    return "\n".join(
        p.read_bytes().decode(errors="replace") for p in sorted(root.rglob("*")) if p.is_file()
    )


def test_preview_job_holds_no_production_secret(world: EngineWorld, tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    known = "#!/bin/sh\necho hello\n"  # user data the pull request's manifest holds anyway
    private = f"#!/bin/sh\necho join-token-{marker}\n"  # applied outside the repository
    password = f"Pw-{marker[:12]}!"
    stack = world.pool("gpu")
    config = StackConfig.from_spec(stack.pool, pool_spec(2, userData=known), NOTICE_URL)
    stack.up(config, login_password=password)
    other = world.pool("other")
    other_config = StackConfig.from_spec(other.pool, pool_spec(1, userData=private))
    other.up(other_config, login_password=password)
    notice_key = world.settings.notice_key(stack.pool.uid)
    production = {
        "user data": f"join-token-{marker}",
        "login password": password,
        "notice key": notice_key,
        "slot token": notices.slot_token(notice_key, 0),
        "passphrase": world.settings.passphrase.get_secret_value(),
    }

    # The trusted sync (main only): reads production without its passphrase.
    copy = tmp_path / "preview-backend"
    copy.mkdir()
    base_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SPOTPOOL_", "PULUMI_CONFIG_PASSPHRASE", "TENCENTCLOUD_"))
    }
    sync = _run(
        ["stacks", "copy-redacted", "--to", f"file://{copy}"],
        {
            **base_env,
            "SPOTPOOL_BACKEND_URL": world.settings.backend_url,
            "SPOTPOOL_PREVIEW_PASSPHRASE": PREVIEW_PASSPHRASE,
        },
    )
    assert sync.returncode == 0, sync.stdout + sync.stderr
    assert "2 stack(s) copied" in sync.stdout

    # The preview's keys can read no user data (the emulator enforces their CAM policy).
    world.emulator.admin_ok("POST", "/_emulator/iam", {"Keys": [
        {"Account": DEFAULT_ACCOUNT, "SecretId": PREVIEW_ID, "SecretKey": PREVIEW_KEY,
         **PREVIEW_POLICY}]})  # fmt: skip
    preview_cvm = world.emulator.cvm(PREVIEW_KEY, PREVIEW_ID)
    attributes = models.DescribeInstancesAttributesRequest()
    attributes.InstanceIds = ["ins-any"]  # refused before any instance is looked up
    attributes.Attributes = ["UserData"]
    denied = error_code(lambda: preview_cvm.DescribeInstancesAttributes(attributes))
    assert denied == "AuthFailure.UnauthorizedOperation"

    # The pull request's job: the copy, its passphrase, Describe-only keys, its own work dirs.
    job = tmp_path / "job"
    job_tmp = job / "tmp"
    job_tmp.mkdir(parents=True)
    job_env = {
        **base_env,
        "TMPDIR": str(job_tmp),
        "SPOTPOOL_BACKEND_URL": f"file://{copy}",
        "PULUMI_CONFIG_PASSPHRASE": PREVIEW_PASSPHRASE,
        "SPOTPOOL_CLOUD_ENDPOINT": world.emulator.endpoint,
        "SPOTPOOL_WORK_DIR": str(job / "work"),
        "TENCENTCLOUD_SECRET_ID": PREVIEW_ID,
        "TENCENTCLOUD_SECRET_KEY": PREVIEW_KEY,
    }
    pr = tmp_path / "pull-request"  # the PR's checkout: what it holds is no secret to it
    same = _manifest(pr / "same", "gpu", known)
    changed = _manifest(pr / "changed", "other", known)
    removed = _manifest(pr / "removed", "gpu", known)
    outputs: list[dict[str, Any]] = []
    for args, code in (
        (["-f", str(same)], 0),
        (["-f", str(changed)], 2),
        (["--removed", str(removed)], 2),
    ):
        out = job / f"preview-{len(outputs)}.json"
        run = _run(["preview", *args, "--format", "json", "--output", str(out)], job_env)
        assert run.returncode == code, run.stdout + run.stderr
        outputs.append(json.loads(out.read_text())["pools"][0])
        outputs[-1]["log"] = run.stdout + run.stderr

    unchanged, user_data_changed, deleted = outputs
    assert unchanged["instances"] == {"create": 0, "update": 0, "replace": 0, "delete": 0,
                                      "same": 2}  # fmt: skip
    changes = user_data_changed["instances"]
    assert changes["update"] + changes["replace"] == 1, changes
    assert deleted["removed"] and deleted["instances"]["delete"] == 2

    # What the job can read: its environment, its files, its output, and the copy decrypted
    # with the passphrase it holds. None of it holds a production secret.
    exported = subprocess.run(
        [
            str(bin_dir() / "pulumi"),
            "stack",
            "export",
            "--show-secrets",
            "--stack",
            f"organization/spotpool/{stack.name}",
        ],
        env={**job_env, "PULUMI_BACKEND_URL": f"file://{copy}"},
        cwd=job,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert exported.returncode == 0, exported.stderr
    assert "[secret: not copied to the preview backend]" in exported.stdout
    seen = {
        "environment": "\n".join(f"{k}={v}" for k, v in job_env.items()),
        "files": _files_text(job) + _files_text(copy),
        "logs": "\n".join(o["log"] for o in outputs),
        "decrypted copy": exported.stdout,
    }
    for where, text in seen.items():
        for what, secret in production.items():
            assert secret not in text, f"the production {what} is in the preview job's {where}"
    # The production state itself still holds them (the test would pass vacuously otherwise).
    prod_export = world.pulumi(other, "stack", "export", "--show-secrets")
    assert f"join-token-{marker}" in prod_export and password in prod_export
