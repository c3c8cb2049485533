"""Notice agents for emulated instances: what cloud-init and systemd do on a real one.

For every live instance of a pool, read its user data back from the cloud (the API the
provider uses, DescribeInstancesAttributes), take the agent's settings from it as the unit's
environment file holds them, and start `spotpool notice-agent` with them — pointed at the
emulator's metadata route for that instance instead of metadata.tencentyun.com. Each agent is
a process of its own, stopped by its pid.
"""

import base64
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr
from tencentcloud.cvm.v20170312 import models

from spotpool.api.notices import agent_settings
from spotpool.engine.tencent import cloud
from spotpool.engine.tencent.credentials import Credentials
from spotpool.localworld.emulator import SPOTPOOL, EmulatorProcess


@dataclass
class NoticeAgents:
    emulator: EmulatorProcess
    region: str
    log_dir: Path
    interval: float = 1.0
    running: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)  # instance id ->

    def _user_data(self, instance_ids: list[str]) -> dict[str, str]:
        keys = Credentials(
            secret_id=SecretStr(self.emulator.secret_id),
            secret_key=SecretStr(self.emulator.secret_key),
        )
        client = cloud.cvm(keys, self.region, self.emulator.endpoint)
        request = models.DescribeInstancesAttributesRequest()
        request.from_json_string(
            json.dumps({"InstanceIds": instance_ids, "Attributes": ["UserData"]})
        )
        reply = client.DescribeInstancesAttributes(request)
        return {
            item.InstanceId: base64.b64decode(item.Attributes.UserData or "").decode()
            for item in reply.InstanceSet
        }

    def boot(self, pool_uid: str) -> list[str]:
        """Start an agent on each live instance of the pool that has none yet (an instance
        whose user data installs no agent gets none); the ids it started agents for."""
        live = [
            item["InstanceId"]
            for item in self.emulator.all_instances()
            if not item.get("Gone")
            and item["InstanceState"] in ("PENDING", "RUNNING")
            and {"Key": "spotpool-pool-uid", "Value": pool_uid} in (item.get("Tags") or [])
            and item["InstanceId"] not in self.running
        ]
        if not live:
            return []
        started = []
        for instance_id, user_data in self._user_data(live).items():
            settings = agent_settings(user_data)
            if not settings:
                continue
            env = {
                **os.environ,
                **settings,
                "SPOTPOOL_METADATA_URL": (
                    f"{self.emulator.endpoint}/_emulator/metadata/{instance_id}/"
                ),
                "SPOTPOOL_INSTANCE_ID": instance_id,
                "SPOTPOOL_NOTICE_INTERVAL": str(self.interval),
            }
            self.log_dir.mkdir(parents=True, exist_ok=True)
            with (self.log_dir / f"agent-{instance_id}.log").open("ab") as log:
                self.running[instance_id] = subprocess.Popen(
                    [str(SPOTPOOL), "notice-agent"],
                    env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                )  # fmt: skip
            started.append(instance_id)
        return started

    def exit_codes(self) -> dict[str, int | None]:
        return {i: p.poll() for i, p in self.running.items()}

    def stop(self) -> None:
        for process in self.running.values():
            if process.poll() is None:
                process.terminate()
        for process in self.running.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
