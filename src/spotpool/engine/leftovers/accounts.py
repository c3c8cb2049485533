"""The cloud accounts (and regions) the sweep of strays must look at, kept in the state backend
(`.spotpool/accounts/<key>.json`) so that they are found again after a restart: a deleted
pool's late instance is swept even when no live pool uses its key pair any more.

A record names where the credentials come from — the pool's namespace and its spec's
credential fields (`credentialsSecretRef`, `assumeRole`, `useOperatorIdentity`) — never the
keys themselves; a pool with inline keys leaves no record.
"""

import hashlib
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from spotpool.engine.state.backend_files import open_backend

PREFIX = ".spotpool/accounts/"
SOURCE_FIELDS = ("credentialsSecretRef", "assumeRole", "useOperatorIdentity")
log = logging.getLogger(__name__)


class AccountRecord(BaseModel):
    namespace: str
    region: str
    source: dict[str, Any] = Field(description="The spec's credential fields (no secret).")
    seen: float = Field(description="Epoch seconds a pool last used it.")

    @property
    def key(self) -> str:
        text = json.dumps([self.namespace, self.region, self.source], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:24]


def account_of(namespace: str, spec: Mapping[str, Any], region: str) -> AccountRecord | None:
    """What to record of a pool's account; None for inline keys (nothing to find them by)."""
    source = {k: spec[k] for k in SOURCE_FIELDS if spec.get(k)}
    if not (source.get("credentialsSecretRef") or source.get("useOperatorIdentity")):
        return None
    return AccountRecord(namespace=namespace, region=region, source=source, seen=time.time())


def save_account(backend_url: str, record: AccountRecord) -> None:
    files = open_backend(backend_url)
    if files is not None:
        files.write(f"{PREFIX}{record.key}.json", record.model_dump_json().encode())


def recorded_accounts(backend_url: str, keep: float) -> list[AccountRecord]:
    """The recorded accounts a pool used less than `keep` seconds ago (older ones removed)."""
    files = open_backend(backend_url)
    if files is None:
        return []
    found = []
    for key in files.keys(PREFIX):
        if not key.endswith(".json"):
            continue
        try:
            record = AccountRecord.model_validate_json(files.read(key))
        except Exception as error:  # unreadable (half-written, removed): skip it
            log.info("account record %s unreadable: %s", key, type(error).__name__)
            continue
        if record.seen < time.time() - keep:
            files.delete(key)
            continue
        found.append(record)
    return found
