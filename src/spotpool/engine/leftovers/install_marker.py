"""The install's marker in its state backend (`.spotpool/installs/<install id>.json`), written at
its first start there: from when the backend has been this install's. Only an instance made
after that can be proven unheld by this backend — one made before may be held by a stack of
another backend the install wrote until then (a wrong URL or S3 prefix after a restore, a `~`
read otherwise than Pulumi reads it), so the sweep only reports it.
"""

import json
import logging
from datetime import UTC, datetime
from urllib.parse import quote

from spotpool.engine.state.backend_files import BackendFiles, open_backend, read_if_present

PREFIX = ".spotpool/installs/"
log = logging.getLogger(__name__)


def marker_key(install_id: str) -> str:
    return f"{PREFIX}{quote(install_id, safe='')}.json"


def marked_since(files: BackendFiles, install_id: str) -> datetime | None:
    """When the install first started on this backend; None: no (readable) marker."""
    raw = read_if_present(files, marker_key(install_id))
    if raw is None:
        return None
    record = json.loads(raw)
    return datetime.fromisoformat(str(record["since"]))


def mark_install(backend_url: str, install_id: str, cluster_id: str | None) -> datetime | None:
    """The install's marker, written now unless the backend has one (kept: its time is the
    install's first start there). None for a backend that is not self-managed."""
    files = open_backend(backend_url)
    if files is None:
        return None
    since = marked_since(files, install_id)
    if since is not None:
        return since
    since = datetime.now(UTC)
    record = {"install": install_id, "cluster": cluster_id, "since": since.isoformat()}
    files.write(marker_key(install_id), json.dumps(record).encode())
    log.info("install %s marked in the state backend (first start there)", install_id)
    return since
