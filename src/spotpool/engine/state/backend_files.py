"""The files of a self-managed Pulumi backend — `file://` or `s3://` — as keys under `.pulumi/`,
for what the engine must do beside Pulumi: read and remove exactly the lock files it verified,
and prune old history. One small interface, two stores.

An `s3://bucket[/prefix]?endpoint=…&use_path_style=true&region=…` URL is the one Pulumi
itself takes (gocloud's s3blob); credentials come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY,
as for Pulumi. Tencent COS speaks the same API (endpoint `https://cos.<region>.myqcloud.com`).
"""

import glob
import gzip
import hashlib
import io
import ipaddress
import json
import logging
import os
import pwd
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import yaml
from minio import Minio
from minio.error import S3Error

ROOT = ".pulumi"
log = logging.getLogger(__name__)


class BackendFiles(Protocol):
    def keys(self, prefix: str) -> list[str]:
        """Keys (relative to the backend root, e.g. `.pulumi/locks/…`) under `prefix`."""
        ...

    def read(self, key: str) -> bytes: ...

    def write(self, key: str, data: bytes) -> None: ...

    def delete(self, key: str) -> None: ...


class FileBackend:
    def __init__(self, root: Path) -> None:
        self.root = root

    def keys(self, prefix: str) -> list[str]:
        """Raises on a directory it cannot read (Path.rglob skips it without a word, and a
        listing that silently lacks a stack is read as "no stack holds it")."""
        base = self.root / prefix
        if not prefix.endswith("/") and not base.is_dir():  # a name prefix, as S3 lists them
            found = [p for p in base.parent.glob(f"{glob.escape(base.name)}*") if p.is_file()]
            return sorted(str(p.relative_to(self.root)) for p in found)
        if not base.exists():
            return []
        files: list[str] = []
        for folder, _, names in os.walk(base, onerror=_raise):
            files += [os.path.join(folder, n) for n in names if os.path.isfile(f"{folder}/{n}")]
        return sorted(str(Path(p).relative_to(self.root)) for p in files)

    def read(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def write(self, key: str, data: bytes) -> None:
        """Whole or not at all, as fileblob writes: a temporary file renamed over the key."""
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_bytes(data)
        (self.root / f"{key}.attrs").unlink(missing_ok=True)  # a stale one's checksum
        partial.replace(path)

    def delete(self, key: str) -> None:
        (self.root / key).unlink(missing_ok=True)
        (self.root / f"{key}.attrs").unlink(missing_ok=True)  # fileblob's metadata beside it


class S3Backend:
    def __init__(self, client: Minio, bucket: str, prefix: str) -> None:
        self.client, self.bucket, self.prefix = client, bucket, prefix.strip("/")

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def keys(self, prefix: str) -> list[str]:
        found = self.client.list_objects(self.bucket, prefix=self._key(prefix), recursive=True)
        skip = len(self.prefix) + 1 if self.prefix else 0
        return sorted(str(item.object_name)[skip:] for item in found if item.object_name)

    def read(self, key: str) -> bytes:
        reply = self.client.get_object(self.bucket, self._key(key))
        try:
            return reply.read()
        finally:
            reply.close()
            reply.release_conn()

    def write(self, key: str, data: bytes) -> None:
        self.client.put_object(self.bucket, self._key(key), io.BytesIO(data), len(data))

    def delete(self, key: str) -> None:
        self.client.remove_object(self.bucket, self._key(key))


def read_if_present(files: BackendFiles, key: str) -> bytes | None:
    """The key's bytes, or None when the backend holds no such key (a missing file, S3's
    NoSuchKey); any other failure is raised: an unreadable key is not an absent one."""
    try:
        return files.read(key)
    except FileNotFoundError:
        return None
    except Exception as error:
        if "NoSuchKey" in str(error):
            return None
        raise


def _raise(error: OSError) -> None:
    raise error


class BackendUrlError(ValueError):
    """A backend URL this process would read otherwise than Pulumi does."""


def file_root(url: str) -> Path:
    """The directory of a `file://` backend as Pulumi resolves it: the query (gocloud's
    options, e.g. `?no_tmp_dir=true`) stripped, `~` the user's home (the account's, as Go's
    os/user; $HOME where the account has none). A relative path is refused: each Pulumi run
    would resolve it in its own workspace directory."""
    path = url.removeprefix("file://").split("?", 1)[0]
    if path == "~" or path.startswith("~/"):
        path = _home() + path[1:]
    if not os.path.isabs(path):
        raise BackendUrlError(
            f"{url}: a file:// backend needs an absolute path (file:///var/lib/…) or ~/…"
        )
    return Path(path)


def _home() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:  # no account for this uid (a container's arbitrary uid)
        return os.environ.get("HOME") or "/"


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def open_backend(url: str, env: Mapping[str, str] | None = None) -> BackendFiles | None:
    """The backend at `url`, or None for one whose files are not ours to touch (Pulumi Cloud).
    `env`: where the S3 keys are (this process's environment, as for Pulumi's runs)."""
    env = os.environ if env is None else env
    if url.startswith("file://"):
        return FileBackend(file_root(url))
    if not url.startswith("s3://"):
        return None
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    endpoint = query.get("endpoint") or "s3.amazonaws.com"
    secure = not endpoint.startswith("http://") and query.get("disable_https") != "true"
    host = endpoint.split("://", 1)[-1].rstrip("/")
    client = Minio(
        host,
        access_key=env.get("AWS_ACCESS_KEY_ID"),
        secret_key=env.get("AWS_SECRET_ACCESS_KEY"),
        session_token=env.get("AWS_SESSION_TOKEN"),
        region=query.get("region") or env.get("AWS_REGION"),
        secure=secure,
    )
    path_style = "true" in (query.get("use_path_style"), query.get("s3ForcePathStyle"))
    if not path_style and not _is_ip(urlsplit(f"//{host}").hostname or ""):
        # As Pulumi's S3 client: https://<bucket>.<endpoint>/… (COS refuses the path style for
        # buckets made after 2024-01-01: PathStyleDomainForbidden); minio would not.
        client.enable_virtual_style_endpoint()  # type: ignore[no-untyped-call]
    return S3Backend(client, parts.netloc, parts.path)


def write_new_stack(
    files: BackendFiles, project: str, stack: str, cli_version: str, secrets: dict[str, object]
) -> bool:
    """A new stack as `pulumi stack init` leaves it on a self-managed backend: a checkpoint
    with the manifest, its secrets provider's state (`secrets`) and no resources (gzip, as
    the engine's runs write it). False, writing nothing, when the backend is not set up yet
    (no project-mode `meta.yaml`): the CLI does that."""
    try:
        meta = yaml.safe_load(files.read(f"{ROOT}/meta.yaml"))
    except Exception:  # missing, unreadable or not YAML: leave it to the CLI
        return False
    if not isinstance(meta, dict) or meta.get("version") != 1:
        return False
    version = cli_version if cli_version.startswith("v") else f"v{cli_version}"
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    manifest = {
        "time": now,
        "magic": hashlib.sha256(version.encode()).hexdigest(),
        "version": version,
    }
    latest = {
        "manifest": manifest,
        "secrets_providers": secrets,
        "metadata": {},
    }
    body = {
        "version": 3,
        "checkpoint": {"stack": f"organization/{project}/{stack}", "latest": latest},
    }
    files.write(
        f"{ROOT}/stacks/{project}/{stack}.json.gz", gzip.compress(json.dumps(body).encode())
    )
    return True


@cache
def _cannot_tell(why: str) -> None:
    """Said once a process and reason: every new stack then costs a CLI run (`stack select`)."""
    log.warning("cannot read the backend's stack files (%s): the CLI makes new stacks", why)


def checkpoint_exists(files: BackendFiles, project: str, stack: str) -> bool:
    """Whether the backend holds the stack (a checkpoint file in any of its forms); True when
    it cannot tell."""
    for suffix in (".json.gz", ".json", ".json.zst"):
        try:
            files.read(f"{ROOT}/stacks/{project}/{stack}{suffix}")
        except FileNotFoundError:
            continue
        except S3Error as err:
            if err.code == "NoSuchKey":
                continue
            _cannot_tell(err.code)
            return True
        except Exception as err:  # unreadable: it may well be there
            _cannot_tell(type(err).__name__)
            return True
        return True
    return False


def latest_deployment(files: BackendFiles, project: str, stack: str) -> dict[str, Any] | None:
    """A stack's latest deployment as its checkpoint file holds it (plain or gzip; zstd aside),
    read without the CLI — and so without the passphrase: secrets stay encrypted."""
    for suffix, decode in ((".json.gz", gzip.decompress), (".json", bytes)):
        try:
            raw = files.read(f"{ROOT}/stacks/{project}/{stack}{suffix}")
        except Exception:  # missing (or unreadable): try the next form
            continue
        try:
            latest = json.loads(decode(raw)).get("checkpoint", {}).get("latest")
        except ValueError:
            return None
        return latest if isinstance(latest, dict) else None
    return None
