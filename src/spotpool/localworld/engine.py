"""The engine's world: one pool's stack (the real Pulumi engine and tencentcloud provider) against
an emulator process, and the plain `pulumi` CLI on it as a person runs it."""

import json
import os
import subprocess
import uuid
from dataclasses import dataclass

from spotpool.api.spec import SpotpoolSpec
from spotpool.api.stackconfig import PoolIdentity, StackConfig
from spotpool.engine.basics.settings import EngineSettings
from spotpool.engine.stacks.stack import PoolStack
from spotpool.engine.state import keyserver
from spotpool.engine.tencent.credentials import Credentials
from spotpool.localworld.emulator import EmulatorProcess

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
        # A keyserver stack's keys, as `spotpool stacks keys` serves them to a person.
        env.update(keyserver.service_for(self.settings.passphrase.get_secret_value()).env())
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
