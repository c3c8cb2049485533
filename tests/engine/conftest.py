"""The real engine world: the pinned pulumi CLI and tencentcloud plugin, a file backend in a
temporary directory, and an emulator process standing in for Tencent Cloud."""

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import SecretStr

from spotpool.api.spec import SpotpoolSpec
from spotpool.api.stackconfig import PoolIdentity, StackConfig
from spotpool.cluster import s3
from spotpool.engine.credentials import Credentials
from spotpool.engine.settings import EngineSettings
from spotpool.engine.stack import PoolStack
from tests.conftest import require_tool
from tests.emulator.harness import SECRET_ID, SECRET_KEY, EmulatorProcess, start_emulator

REGION = "ap-singapore"


def pool_spec(replicas: int, **extra: object) -> SpotpoolSpec:
    return SpotpoolSpec.model_validate(
        {
            "region": REGION,
            "availabilityZones": ["ap-singapore-2", "ap-singapore-3"],
            "instanceTypes": ["GN7.2XLARGE32"],
            "minimum": 0,
            "maximum": 20,
            "replicas": replicas,
            "vpcId": "DEFAULT",
            "subnetId": "DEFAULT",
            "imageId": "img-eb30mz89",
            "instanceChargeType": "SPOTPAID",
            "credentialsSecretRef": {"name": "tencentcloud"},
            **extra,
        }
    )


@dataclass
class EngineWorld:
    emulator: EmulatorProcess
    settings: EngineSettings
    credentials: Credentials
    progress: list[str]

    def pool(self, name: str = "gpu") -> PoolStack:
        identity = PoolIdentity(namespace="team-a", name=name, uid=str(uuid.uuid4()))
        return PoolStack(identity, self.settings, self.credentials, REGION, self.progress.append)

    def config(self, stack: PoolStack, replicas: int, **extra: object) -> StackConfig:
        return StackConfig.from_spec(stack.pool, pool_spec(replicas, **extra))

    def cloud_instances(self, stack: PoolStack) -> dict[str, str]:
        """id -> state of every instance the emulator lists with this pool's uid tag."""
        return {
            item["InstanceId"]: item["InstanceState"]
            for item in self.emulator.all_instances()
            if not item.get("Gone")
            and {"Key": "spotpool-pool-uid", "Value": stack.pool.uid} in (item.get("Tags") or [])
        }

    def pulumi(self, stack: PoolStack, *args: str) -> str:
        """The plain pulumi CLI on the pool's stack, from its workspace, as a person runs it."""
        env = {
            **os.environ,
            "PULUMI_BACKEND_URL": self.settings.backend_url,
            "PULUMI_CONFIG_PASSPHRASE": self.settings.passphrase.get_secret_value(),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
        }
        done = subprocess.run(
            [str(self.settings.tools_dir / "pulumi"), *args, "--stack", stack.name],
            cwd=self.settings.work_root / stack.name,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def unrecord(self, stack: PoolStack, slot: int) -> None:
        """Drop a slot's instance from the state but not from the cloud: what a run killed
        between the cloud's reply and the state write leaves."""
        exported = json.loads(self.pulumi(stack, "stack", "export"))
        urns = [r["urn"] for r in exported["deployment"]["resources"]]
        (urn,) = [urn for urn in urns if urn.endswith(f"-slot-{slot}")]
        self.pulumi(stack, "state", "delete", urn, "--yes")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[EngineWorld]:
    yield from _world(tmp_path, f"file://{tmp_path / 'backend'}")


@pytest.fixture
def s3_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EngineWorld]:
    """The same world with its state in a real S3 server (versitygw) instead of a directory."""
    require_tool("versitygw")
    server = s3.start(tmp_path / "s3")
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)  # Pulumi's runs inherit them, as in a pod
    try:
        yield from _world(tmp_path, server.backend_url)
    finally:
        server.stop()


def _world(tmp_path: Path, backend_url: str) -> Iterator[EngineWorld]:
    require_tool("pulumi")
    require_tool("pulumi-resource-tencentcloud")
    emulator = start_emulator(tmp_path / "cloud.db", tmp_path / "emulator.log", boot_seconds=0)
    settings = EngineSettings(
        backend_url=backend_url,
        passphrase=SecretStr("engine-tests-passphrase"),
        work_root=tmp_path / "workspaces",
        cloud_endpoint=emulator.endpoint,
        # The tests make their strays by hand a moment before the sweep: no in-flight create
        # is theirs (tests/test_orphans.py covers the age rule, test_engine_emulator one case).
        orphan_min_age=0,
    )
    (tmp_path / "backend").mkdir()
    credentials = Credentials(secret_id=SecretStr(SECRET_ID), secret_key=SecretStr(SECRET_KEY))
    try:
        yield EngineWorld(emulator, settings, credentials, [])
    finally:
        emulator.stop()
