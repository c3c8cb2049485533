"""Where stacks live and which cloud they talk to: everything an engine run needs but the spec."""

import hashlib
import hmac
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SecretStr, SkipValidation

from spotpool.api.notices import pool_key
from spotpool.engine.fencing.ownership import Writer
from spotpool.toolchain.paths import bin_dir


def state_root() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "spotpool"


def repository_root() -> Path:
    """The directory holding Pulumi.yaml (the project) — the checkout this package runs from."""
    return Path(__file__).resolve().parents[4]


class StackGuard(Protocol):
    """Checked before any run that could adopt, re-tag or terminate (stacks/stack_guard.py)."""

    def check(self, pool: Any) -> str | None:
        """Raise when the stack is not this cluster's to run; a note when it was taken over."""
        ...

    def release(self, pool: Any) -> None:
        """The stack is gone (destroyed or forgotten): it names no holder any more."""
        ...


MIN_PASSPHRASE = 16  # characters
# Notice secrets derived from the passphrase: stretched as Pulumi stretches it for the state
# (PBKDF2-SHA256, 1,000,000 rounds; a salt of their own), then HKDF-SHA256 to the secret.
NOTICE_KDF_ROUNDS = 1_000_000
NOTICE_KDF_SALT = b"spotpool-notices/v2/pbkdf2"
NOTICE_KDF_INFO = b"spotpool-notices/v2/notice-secret"


def weak_passphrase(passphrase: str) -> str | None:
    """Why a passphrase is too weak to guard the stacks' secrets and the notice tokens derived
    from it, or None."""
    if len(passphrase) < MIN_PASSPHRASE:
        return f"it has {len(passphrase)} characters; give at least {MIN_PASSPHRASE}"
    if len(set(passphrase)) < 8:
        return "it repeats a few characters; give random ones"
    return None


def hkdf_sha256(key: bytes, info: bytes, length: int = 32, salt: bytes = b"") -> bytes:
    """HKDF-SHA256 (RFC 5869): extract, then expand to `length` bytes."""
    prk = hmac.new(salt or b"\0" * 32, key, hashlib.sha256).digest()
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out, counter = out + block, counter + 1
    return out[:length]


@lru_cache(maxsize=8)
def stretched_notice_secret(passphrase: str) -> bytes:
    """The notice secret derived from the passphrase: a token lets no one test passphrase
    guesses faster than against the state itself (~1 s of CPU per guess per core)."""
    stretched = hashlib.pbkdf2_hmac(
        "sha256", passphrase.encode(), NOTICE_KDF_SALT, NOTICE_KDF_ROUNDS
    )
    return hkdf_sha256(stretched, NOTICE_KDF_INFO)


def passphrase_from_env() -> str | None:
    """The stacks' passphrase from the environment (SPOTPOOL_PASSPHRASE, else Pulumi's own)."""
    return os.environ.get("SPOTPOOL_PASSPHRASE") or os.environ.get("PULUMI_CONFIG_PASSPHRASE")


class EngineSettings(BaseModel):
    backend_url: str = Field(description="Pulumi state backend: file://…, s3://… or https://…")
    passphrase: SecretStr = Field(description="Passphrase of the stacks' secrets provider.")
    passphrase_file: Path | None = Field(
        None,
        description="Where the passphrase was read from: the Pulumi runs are given this file "
        "(PULUMI_CONFIG_PASSPHRASE_FILE), never the passphrase in their environment.",
    )
    work_root: Path = Field(description="Per-stack workspaces (stack settings files).")
    project_dir: Path = Field(default_factory=repository_root)
    cloud_endpoint: str | None = Field(
        None, description="URL of `spotpool emulator serve`; None means the real Tencent Cloud."
    )
    tools_dir: Path = Field(default_factory=bin_dir, description="Where the pulumi CLI is.")
    writer: Annotated[Writer | None, SkipValidation] = Field(
        None,
        exclude=True,
        description="Who this process is for lock breaking (its Lease); None: by hand.",
    )
    guard: Annotated[StackGuard | None, SkipValidation] = Field(
        None,
        exclude=True,
        description="Whose stacks these are (claims and holder records); None: by hand.",
    )
    operation_timeout: float = Field(
        1800.0, gt=0, description="Seconds an operation may run before it is killed."
    )

    install_id: str = Field(
        "default",
        min_length=1,
        max_length=63,
        description="Names this install on every instance it makes (tag spotpool-install): "
        "only its own orphans are ever adopted or terminated.",
    )
    cluster_id: str | None = Field(
        None,
        max_length=63,
        description="Names the cluster whose operator this is on every instance it makes (tag "
        "spotpool-cluster): the kube-system Namespace's uid, or an id set on purpose for a "
        "rebuilt cluster. Only instances with this cluster's and this install's tags are "
        "ever adopted or terminated. None: run by hand, instances without the tag are its own.",
    )
    orphan_min_age: float = Field(
        900.0, ge=0, description="Seconds before an orphan may be another writer's create."
    )
    notice_secret: SecretStr | None = Field(
        None,
        description="Key the termination-notice tokens derive from (HMAC per pool, per slot); "
        "None: derived from the passphrase (HKDF over its PBKDF2 stretch).",
    )
    rate_limit_runs: bool = Field(
        True,
        description="Send the provider's API calls inside Pulumi runs through a local proxy "
        "that takes tokens from the same per-action buckets as the operator's own calls.",
    )
    history_keep: int = Field(
        10, ge=0, description="Updates kept in each stack's history (0: keep all)."
    )
    secrets_provider: Literal["passphrase", "keyserver"] = Field(
        "passphrase",
        description="New stacks' secrets provider: `passphrase` (Pulumi's: every CLI run "
        "derives the key) or `keyserver` (`hashivault://spotpool`: a run asks this process's "
        "key service on loopback for the stack's data key; engine/state/keyserver.py).",
    )

    model_config = ConfigDict(arbitrary_types_allowed=True)

    @classmethod
    def from_env(cls) -> "EngineSettings":
        state = state_root()
        passphrase = passphrase_from_env()
        if not passphrase:
            raise ValueError(
                "no secrets passphrase: set SPOTPOOL_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE)"
            )
        backend = os.environ.get("SPOTPOOL_BACKEND_URL") or f"file://{state / 'backend'}"
        return cls(
            backend_url=backend,
            passphrase=SecretStr(passphrase),
            work_root=Path(os.environ.get("SPOTPOOL_WORK_DIR") or state / "workspaces"),
            cloud_endpoint=os.environ.get("SPOTPOOL_CLOUD_ENDPOINT") or None,
            secrets_provider=os.environ.get("SPOTPOOL_SECRETS_PROVIDER") or "passphrase",
            # The operator's own variable: a preview of its stacks tags instances as it does.
            install_id=os.environ.get("SPOTPOOL_INSTALL_ID") or "default",
            cluster_id=os.environ.get("SPOTPOOL_CLUSTER_ID") or None,
        )

    def notice_key(self, pool_uid: str) -> str:
        """The pool's notice key (its stack holds it as a secret; tokens derive from it)."""
        if self.notice_secret is not None:
            secret = self.notice_secret.get_secret_value().encode()
        else:
            secret = stretched_notice_secret(self.passphrase.get_secret_value())
        return pool_key(secret, pool_uid)

    def passphrase_env(self) -> dict[str, str]:
        """How a Pulumi run finds the passphrase: a file holding exactly it when one served
        it (the one given, or a private copy without its trailing newline), else the value."""
        passphrase = self.passphrase.get_secret_value()
        if self.passphrase_file is None:
            return {"PULUMI_CONFIG_PASSPHRASE": passphrase}
        try:
            exact = self.passphrase_file.read_text() == passphrase
        except OSError:
            exact = False
        if exact:
            return {"PULUMI_CONFIG_PASSPHRASE_FILE": str(self.passphrase_file)}
        copy = self.work_root / ".passphrase"
        try:
            if copy.read_text() != passphrase:
                raise OSError
        except OSError:
            self.work_root.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w") as file:
                file.write(passphrase)
        return {"PULUMI_CONFIG_PASSPHRASE_FILE": str(copy)}

    def backend_for_display(self) -> str:
        """The backend URL without any userinfo or query (which may carry credentials)."""
        scheme, sep, rest = self.backend_url.partition("://")
        if not sep:
            return self.backend_url
        host_and_path = rest.rsplit("@", 1)[-1].split("?", 1)[0]
        return f"{scheme}://{host_and_path}"
