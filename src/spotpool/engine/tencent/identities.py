"""One credential cache per identity, shared by everything the process calls the cloud with.

An identity is a role assumed with some keys, or the operator's own service-account identity
(AssumeRoleWithWebIdentity). Its temporary credentials are obtained once, handed to the fleet
probe, the fast path and Pulumi runs alike, and renewed when two thirds of their life is gone
(so nothing ever signs with keys about to expire). The API proxy asks `current_for` the SecretId
a Pulumi run signed with and re-signs with the renewal, so a run longer than a credential's life
never fails for it. A renewal that fails while the held keys still have life keeps them (the
cloud honours them until they expire) and tries again on the next use.
"""

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from spotpool.api.identity import AssumeRole
from spotpool.engine.tencent import sts
from spotpool.engine.tencent.credentials import Credentials

RENEW_AT = 2 / 3  # of a credential's life
MIN_REMAINING_SECONDS = 20.0  # below this, held keys are not used after a failed renewal
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WebIdentity:
    """The operator's own identity, set in the install: the role its service-account token is
    exchanged for, the CAM identity provider trusting the cluster's issuer, the token file.

    Read from the variables TKE's pod identity sets (and the chart sets the same way):
    TKE_ROLE_ARN, TKE_PROVIDER_ID, TKE_WEB_IDENTITY_TOKEN_FILE.
    """

    role: AssumeRole
    provider_id: str
    token_file: Path

    @classmethod
    def from_env(cls) -> "WebIdentity | None":
        role_arn = os.environ.get("TKE_ROLE_ARN")
        provider_id = os.environ.get("TKE_PROVIDER_ID")
        token_file = os.environ.get("TKE_WEB_IDENTITY_TOKEN_FILE")
        if not (role_arn and provider_id and token_file):
            return None
        session = os.environ.get("SPOTPOOL_ROLE_SESSION_NAME", "spotpool-operator")
        return cls(
            AssumeRole(role_arn=role_arn, session_name=session), provider_id, Path(token_file)
        )

    def token(self) -> str:
        # Read at every exchange: the kubelet rotates the projected token in place.
        return self.token_file.read_text().strip()


@dataclass
class _Held:
    credentials: Credentials
    issued: float


class CredentialCache:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._held: dict[str, _Held] = {}
        self._fetchers: dict[str, Callable[[], Credentials]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        # Temporary SecretId -> its identity and expiry; dropped once expired.
        self._issued_to: dict[str, tuple[str, float | None]] = {}
        self.fetches = 0  # STS calls made, for tests and logs

    def role(self, base: Credentials, role: AssumeRole, endpoint: str | None) -> Credentials:
        """`role`'s credentials, assumed with `base` (keys, or another identity's)."""
        identity = (
            f"role:{role.role_arn}/{role.session_name}/{role.duration_seconds}/"
            f"{role.external_id or ''}|{base.identity_key()}"
        )
        return self.get(identity, lambda: sts.assume_role(base.current(), role, endpoint, identity))

    def web_identity(self, web: WebIdentity, endpoint: str | None) -> Credentials:
        """The operator's own credentials: its service-account token exchanged for its role."""
        identity = f"web:{web.role.role_arn}/{web.provider_id}"
        return self.get(
            identity,
            lambda: sts.assume_role_with_web_identity(
                web.provider_id, web.token(), web.role, endpoint, identity
            ),
        )

    def get(self, identity: str, fetch: Callable[[], Credentials]) -> Credentials:
        """The identity's live credentials (renewing ones), fetched or renewed when due."""
        with self._guard:
            self._fetchers[identity] = fetch
            lock = self._locks.setdefault(identity, threading.Lock())
        with lock:
            held = self._held.get(identity)
            now = self.clock()
            if held is None or self._due(held, now):
                held = self._renew(identity, fetch, held, now)
        return held.credentials.model_copy().renewing(lambda: self._current(identity))

    def current_for(self, secret_id: str) -> Credentials | None:
        """The live credentials of the identity a temporary SecretId was issued to (renewed
        if due), or None for a SecretId this cache never issued (a permanent key pair) or
        one that expired."""
        renew = self.renewer_for(secret_id)
        return None if renew is None else renew()

    def renewer_for(self, secret_id: str) -> Callable[[], Credentials] | None:
        """What gives the live credentials of the identity a temporary SecretId (still
        alive) was issued to, for as long as the holder needs them (a Pulumi run's)."""
        found = self._issued_to.get(secret_id)
        if found is None or (found[1] is not None and found[1] <= self.clock()):
            return None
        identity = found[0]
        return lambda: self._current(identity)

    def _current(self, identity: str) -> Credentials:
        return self.get(identity, self._fetchers[identity]).model_copy()

    def _due(self, held: _Held, now: float) -> bool:
        expires = held.credentials.expires
        if expires is None:
            return False
        return now >= held.issued + RENEW_AT * (expires - held.issued)

    def _renew(
        self, identity: str, fetch: Callable[[], Credentials], held: _Held | None, now: float
    ) -> _Held:
        try:
            fresh = fetch()
        except sts.StsError as error:
            remaining = (held.credentials.expires or 0) - now if held else 0
            if held is None or remaining < MIN_REMAINING_SECONDS:
                raise
            log.warning(
                "renewing temporary credentials failed (%s); the held ones have %.0f s left",
                error.code,
                remaining,
            )
            return held
        self.fetches += 1
        renewed = _Held(fresh, now)
        self._held[identity] = renewed
        with self._guard:  # the expired ones go: they sign nothing any more
            self._issued_to = {
                k: v for k, v in self._issued_to.items() if v[1] is None or v[1] > now
            }
            self._issued_to[fresh.secret_id.get_secret_value()] = (identity, fresh.expires)
        return renewed


CREDENTIALS = CredentialCache()  # this process's one cache
