"""What the limit tests look at: a namespace's live instances sampled every second from the
emulator (a race's highest count), a SpotpoolAccessPolicy limiting one namespace, and a
termination notice posted as an instance's agent would (its token read from its user data)."""

import base64
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from pydantic import SecretStr
from tencentcloud.cvm.v20170312 import models

from spotpool.api import notices
from spotpool.api.stackconfig import TAG_POOL
from spotpool.engine.tencent import cloud
from spotpool.engine.tencent.credentials import Credentials
from tests.operator.world import GONE_STATES, OperatorWorld, pool_manifest

REGION = "ap-singapore"


def live_in(world: OperatorWorld, namespace: str) -> int:
    """The namespace's instances the cloud runs now (pending ones too: they are paid for)."""
    return sum(
        1
        for item in world.emulator.all_instances()
        if not item.get("Gone")
        and item["InstanceState"] not in GONE_STATES
        and any(t.get("Key") == TAG_POOL and str(t.get("Value", "")).startswith(f"{namespace}/")
                for t in item.get("Tags") or [])
    )  # fmt: skip


@dataclass
class Sampler:
    """Samples of a namespace's live instances, one a second, taken on a thread."""

    samples: list[int] = field(default_factory=list)

    @property
    def most(self) -> int:
        return max(self.samples, default=0)


@contextmanager
def sampled(world: OperatorWorld, namespace: str, every: float = 1.0) -> Iterator[Sampler]:
    sampler, done = Sampler(), threading.Event()

    def sample() -> None:
        while not done.is_set():
            sampler.samples.append(live_in(world, namespace))
            done.wait(every)

    thread = threading.Thread(target=sample, name=f"sample-{namespace}", daemon=True)
    thread.start()
    try:
        yield sampler
    finally:
        done.set()
        thread.join(10)
        sampler.samples.append(live_in(world, namespace))


def race(world: OperatorWorld, namespace: str, directory: Path, pools: int) -> tuple[int, int, int]:
    """`pools` pools of one instance applied by one `kubectl apply` of a multi-document file,
    sampled until each runs or is held: (most live at once, running, held)."""
    docs = [pool_manifest(f"p{n:02d}", replicas=1, maximum=1) for n in range(pools)]
    (directory / "pools.yaml").write_text(yaml.safe_dump_all(docs))

    def settled() -> tuple[int, int] | None:
        statuses = [p.get("status") or {} for p in world.pools(namespace)]
        ready = [s for s in statuses if s.get("readyReplicas") == 1]
        held = [s for s in statuses if any(c["type"] == "Limited" and c["status"] == "True"
                                           for c in s.get("conditions") or [])]  # fmt: skip
        return (len(ready), len(held)) if len(ready) + len(held) == pools else None

    with sampled(world, namespace) as live:
        world.kube.ok("-n", namespace, "apply", "-f", str(directory / "pools.yaml"))
        running, held = world.wait_until(settled, f"{pools} pools running or held", timeout=300)
    return live.most, running, held


def limit(world: OperatorWorld, namespace: str, **limits: Any) -> str:
    """A SpotpoolAccessPolicy that limits `namespace` (it grants nothing), by name."""
    name = f"e2e-limits-{namespace}"
    policy = {"apiVersion": "devops.jokerbai.com/v1", "kind": "SpotpoolAccessPolicy",
              "metadata": {"name": name},
              "spec": {"namespaces": {"names": [namespace]}, "limits": limits}}  # fmt: skip
    world.kube.ok("apply", "-f", "-", stdin=json.dumps(policy))
    return name


def policy_row(world: OperatorWorld, name: str) -> dict[str, str]:
    """The policy's row as `kubectl get spap` prints it: column -> cell."""
    header, row = world.kube.ok("get", "spap", name).splitlines()[:2]
    columns = header.split()
    starts = [header.index(f" {c}") + 1 if i else 0 for i, c in enumerate(columns)]
    ends = [*starts[1:], len(row) + 1]
    return {c: row[a:b].strip() for c, a, b in zip(columns, starts, ends, strict=True)}


def reservations(world: OperatorWorld, name: str) -> dict[str, dict[str, Any]]:
    """The policy's ledger: uid -> reservation."""
    policy = json.loads(world.kube.ok("get", "spap", name, "-o", "json"))
    found: dict[str, dict[str, Any]] = (policy.get("status") or {}).get("reservations") or {}
    return found


def post_notice(world: OperatorWorld, instance_id: str) -> tuple[int, str]:
    """A termination notice for `instance_id`, two minutes out, signed with the token its user
    data holds (as its agent sends it)."""
    keys = Credentials(secret_id=SecretStr(world.emulator.secret_id),
                       secret_key=SecretStr(world.emulator.secret_key))  # fmt: skip
    client = cloud.cvm(keys, REGION, world.emulator.endpoint)
    request = models.DescribeInstancesAttributesRequest()
    request.from_json_string(json.dumps({"InstanceIds": [instance_id], "Attributes": ["UserData"]}))
    user_data = client.DescribeInstancesAttributes(request).InstanceSet[0].Attributes.UserData
    agent = notices.agent_settings(base64.b64decode(user_data).decode())
    when = datetime.now(UTC) + timedelta(minutes=2) + notices.BEIJING
    fields = {"poolUid": agent["SPOTPOOL_NOTICE_POOL"], "slot": int(agent["SPOTPOOL_NOTICE_SLOT"]),
              "instanceId": instance_id, "terminationTime": when.strftime("%Y-%m-%d %H:%M:%S"),
              "nonce": agent.get("SPOTPOOL_NOTICE_NONCE", "")}  # fmt: skip
    body = json.dumps({k: v for k, v in fields.items() if v != ""}).encode()
    signature = notices.sign(agent["SPOTPOOL_NOTICE_TOKEN"], int(time.time()), body)
    port = int(world.env["SPOTPOOL_NOTICE_PORT"])
    request_ = urllib.request.Request(
        f"http://127.0.0.1:{port}{notices.REPORT_PATH}", data=body, method="POST",
        headers={"Content-Type": "application/json", notices.SIGNATURE_HEADER: signature},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request_, timeout=10) as reply:
            return reply.status, json.load(reply)["message"]
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")
