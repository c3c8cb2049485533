"""spec.terminationNotices.onNotice end to end (real kube-apiserver, operator process, Pulumi
engine, emulator, one `spotpool notice-agent` per emulated instance): on a notice the agent runs
the pool's command on the instance before the cloud takes it, and the operator records its exit
code and duration in the status and as an Event; the surge instance that takes the slot knows
the instance it replaced (SPOTPOOL_PREVIOUS_INSTANCE_ID), through its promotion."""

import os
import shlex
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from spotpool.api.notices import PREVIOUS_FILE, PREVIOUS_TAG, agent_settings
from spotpool.localworld.agents import NoticeAgents
from tests.operator.world import OperatorWorld, pool_manifest

pytestmark = pytest.mark.e2e
BOOT, NOTICE = 2.0, 30.0


@pytest.fixture
def notice_options() -> dict[str, Any]:
    return {"boot_seconds": BOOT, "notice_seconds": NOTICE, "namespace_prefix": "onnotice-"}


def _when(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _pool(name: str, command: str) -> dict[str, Any]:
    notices = {"onNotice": command, "onNoticeTimeoutSeconds": 20}
    return pool_manifest(name, replicas=1, refreshInterval="60s", terminationNotices=notices)


def test_the_on_notice_command_runs_before_the_reclaim_and_is_reported(
    notice_world: OperatorWorld, tmp_path: Path
) -> None:
    ns = notice_world.namespace()
    marker = tmp_path / "checkpoint"
    saving = f'echo "$SPOTPOOL_INSTANCE_ID" > {shlex.quote(str(marker))}; sleep 1'
    notice_world.apply(ns, _pool("train", saving))
    notice_world.apply(ns, _pool("broken", "echo no space left >&2; exit 7"))
    uids, victims = {}, {}
    for name in ("train", "broken"):
        pool = notice_world.wait_ready(ns, name, 1)
        uids[name] = pool["metadata"]["uid"]
        (victims[name],) = (i["instanceId"] for i in pool["status"]["instances"])
    agents = NoticeAgents(notice_world.emulator, "ap-singapore", notice_world.directory / "agents")
    try:
        for name in ("train", "broken"):
            assert agents.boot(uids[name]) == [victims[name]]
        notice_world.emulator.admin_ok(
            "POST", "/_emulator/reclaim", {"InstanceIds": sorted(victims.values())}
        )

        def recorded() -> dict[str, dict[str, Any]] | None:
            found = {
                n: notice_world.status(ns, n).get("notices", {}).get("checkpoints") for n in victims
            }
            return {n: c[0] for n, c in found.items() if c} if all(found.values()) else None

        # The commands must end before the reclaim (asserted below from the marker's time);
        # their results may reach the status after it, on a busy machine.
        checkpoints = notice_world.wait_until(
            recorded, "both onNotice results", timeout=NOTICE + 60
        )

        def gone() -> dict[str, Any] | None:
            cloud = {i["InstanceId"]: i for i in notice_world.emulator.all_instances()}
            return cloud if all(cloud[v].get("Gone") for v in victims.values()) else None

        cloud = notice_world.wait_until(gone, "the reclaims", timeout=NOTICE + 30)
        codes = agents.exit_codes()

        def promoted() -> str | None:
            status = notice_world.status(ns, "train")
            (slot,) = status.get("instances") or [{}]
            taken = slot.get("instanceId") not in (None, victims["train"])
            return str(slot["instanceId"]) if taken and not status.get("surges") else None

        surge = notice_world.wait_until(
            promoted, "the surge instance in slot 0", timeout=NOTICE + 60
        )
        user_data = agents._user_data([surge])[surge]
    finally:
        agents.stop()

    # The command ran on the noticed instance and ended before the cloud took it.
    assert marker.read_text().strip() == victims["train"]
    old = cloud[victims["train"]]
    assert old["GoneReason"] == "reclaimed"
    assert os.stat(marker).st_mtime < _when(old["GoneTime"])
    assert os.stat(marker).st_mtime < _when(old["SpotTerminationTime"])
    saved, failed = checkpoints["train"], checkpoints["broken"]
    assert (saved["slot"], saved["instanceId"], saved["exitCode"]) == (0, victims["train"], 0)
    assert 1.0 <= saved["seconds"] < 10 and not saved.get("timedOut")
    assert (failed["instanceId"], failed["exitCode"]) == (victims["broken"], 7)
    assert _when(saved["time"]) < _when(old["GoneTime"])
    assert codes[victims["train"]] == 0 and codes[victims["broken"]] == 0  # both reported
    events = {name: notice_world.events(ns, name) for name in victims}
    (good,) = [e for e in events["train"] if e[1] == "CheckpointSaved"]
    assert good[0] == "Normal" and f"{victims['train']} (slot 0) exited 0 after" in good[2]
    (bad,) = [e for e in events["broken"] if e[1] == "CheckpointFailed"]
    assert bad[0] == "Warning" and "exited 7 after" in bad[2]
    assert not [e for e in events["train"] if e[1] == "CheckpointFailed"]
    # The surge instance, now the slot's, knows the instance it replaced; promoting it made
    # nothing new (its user data did not change).
    assert agent_settings(user_data)["SPOTPOOL_PREVIOUS_INSTANCE_ID"] == victims["train"]
    assert f"path: {PREVIOUS_FILE}" in user_data and f"\n      {victims['train']}\n" in user_data
    ours = [
        i for i in notice_world.emulator.all_instances()
        if {"Key": "spotpool-pool-uid", "Value": uids["train"]} in (i.get("Tags") or [])
    ]  # fmt: skip
    assert sorted(i["InstanceId"] for i in ours) == sorted([victims["train"], surge])
    (new,) = [i for i in ours if i["InstanceId"] == surge]
    assert {"Key": PREVIOUS_TAG, "Value": victims["train"]} in new["Tags"]
    print(
        f"onNotice: marker {_when(old['GoneTime']) - os.stat(marker).st_mtime:.1f} s before "
        f"the reclaim; ran {saved['seconds']:.2f} s (exit 0), failing one {failed['seconds']:.2f}"
        " s (exit 7)"
    )
