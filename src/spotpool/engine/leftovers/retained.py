"""What a deletion with deletionPolicy Retain keeps, marked so that the sweep of deleted pools'
instances (operator strays.py) never takes it: the pool's uid and the instances its state held
in the state backend (`.spotpool/retained/<uid>.json`, read by every replica, needs no cloud
key), and each kept instance tagged `spotpool-retained` (seen in the console, and by the sweep
of any install). A Retain deletion made before these marks existed left neither: its
instances also lack the cluster tag, which alone keeps every sweep off them.
"""

import json
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from spotpool.api.stackconfig import install_tag
from spotpool.engine.basics.errors import EngineError
from spotpool.engine.basics.stack_view import StackView
from spotpool.engine.leftovers.orphans import GONE_STATES
from spotpool.engine.state.backend_files import BackendFiles, open_backend
from spotpool.engine.tencent import cloud

PREFIX = ".spotpool/retained/"
RETRIES = 3  # tries of each instance's retained tag


def mark_retained(pool: StackView, held: Iterable[str] = ()) -> list[str]:
    """Mark the pool as kept: its uid and `held` (the instances its state holds) in the
    backend, then, when its key pair works, every live instance its state holds tagged
    (whatever its install tag) and its other live ones of this install. Notes on what could
    not be done; raises when nothing at all marks it (no backend of ours and no working key
    pair): the sweep would take them."""
    when = datetime.now(UTC).isoformat(timespec="seconds")
    held = set(held)
    files = open_backend(pool.settings.backend_url)
    if files is not None:
        record = {"uid": pool.pool.uid, "stack": pool.name, "retained": when,
                  "instances": sorted(held)}  # fmt: skip
        files.write(f"{PREFIX}{pool.pool.uid}.json", json.dumps(record).encode())
    ours = (None, pool.settings.install_id, install_tag(pool.settings.install_id))
    failed: list[str] = []
    try:
        client = cloud.cvm(pool.credentials, pool.region, pool.settings.cloud_endpoint)
        kept = [  # what the stack holds whatever its install tag (a pool moved between
            i.instance_id  # installs without an up), and this install's beside it
            for i in cloud.pool_instances(client, pool.pool.uid)
            if i.state not in GONE_STATES and (i.instance_id in held or i.install in ours)
        ]
        for instance_id in kept:  # one at a time, each tried again: one failure is its own
            error = _tag_retained(client, instance_id, when)
            if error is not None:
                failed.append(f"{instance_id} ({error})")
    except Exception as error:
        failed.append(f"the pool's instances ({type(error).__name__})")
    if failed and files is None:
        raise EngineError(
            f"could not tag {', '.join(failed)} of stack {pool.name} as retained and the "
            "backend keeps no record of ours: restore the pool's key pair"
        )
    if failed:
        return [f"not tagged as retained: {', '.join(failed)}; the backend records the pool "
                "and the instances its stack held as retained"]  # fmt: skip
    return []


def _tag_retained(client: Any, instance_id: str, when: str) -> str | None:
    """Tag one instance `spotpool-retained`, three tries a second or two apart; the last
    error's name, or None."""
    for attempt in range(RETRIES):
        try:
            cloud.mark_retained(client, [instance_id], when)
            return None
        except Exception as error:
            if attempt == RETRIES - 1:
                return type(error).__name__
            time.sleep(1.0 + attempt)
    return None


def retained_uids(backend_url: str) -> set[str]:
    """The uids of the pools deleted with Retain, as the backend records them."""
    files = open_backend(backend_url)
    return set() if files is None else retained_records(files)[0]


def retained_records(files: BackendFiles) -> tuple[set[str], set[str]]:
    """(pool uids, instance ids) the backend's Retain records name; a record that cannot be
    read still names its pool (its file name)."""
    uids: set[str] = set()
    instances: set[str] = set()
    for key in files.keys(PREFIX):
        if not key.endswith(".json"):
            continue
        uids.add(key.rsplit("/", 1)[-1].removesuffix(".json"))
        try:
            record = json.loads(files.read(key))
        except (OSError, ValueError):
            continue
        instances |= {str(i) for i in record.get("instances") or [] if i}
    return uids, instances
