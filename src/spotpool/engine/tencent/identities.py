"""One credential cache per identity, shared by everything the process calls the cloud with.

An identity is a role assumed with some keys, or the operator's own service-account identity
(AssumeRoleWithWebIdentity). Its temporary credentials are obtained once, handed to the fleet
probe, the fast path and Pulumi runs alike, and renewed when two thirds of their life is gone
(so nothing ever signs with keys about to expire). The API proxy asks `current_for` the SecretId
a Pulumi run signed with and re-signs with the renewal, so a run longer than a credential's life
never fails for it. A renewal that fails while the held keys still have life keeps them (the
cloud honours them until they expire) and tries again on the next use.

An identity obtained for a pool carries the check of the pool's grant (the access policies):
it is asked again before every renewal, and `recheck` asks every identity's at once. An
identity whose grant is refused is revoked on the spot: its keys are dropped, never renewed,
and whoever still holds them (a fleet probe's group, a sweep, a Pulumi run through the API
proxy) gets `Revoked` instead of keys.
"""

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from spotpool.api.access import Refusal
from spotpool.api.identity import AssumeRole
from spotpool.engine.tencent import sts
from spotpool.engine.tencent.credentials import Credentials

RENEW_AT = 2 / 3  # of a credential's life
MIN_REMAINING_SECONDS = 20.0  # below this, held keys are not used after a failed renewal
log = logging.getLogger(__name__)
# Why the identity's grant no longer holds (None: it holds). An error reading the policies is
# no refusal: the grant stands until a refusal is read.
Check = Callable[[], Refusal | None]


class Revoked(sts.StsError):
    """The identity's grant was withdrawn: its keys are gone (code: the refusal's reason)."""


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
        return cls(AssumeRole(role_arn=role_arn), provider_id, Path(token_file))

    def session(self, name: str) -> "WebIdentity":
        """The same identity under session `name` (each pool's own: api.identity.session_name)."""
        role = self.role.model_copy(update={"session_name": name})
        return WebIdentity(role, self.provider_id, self.token_file)

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
        self._checks: dict[str, Check] = {}  # identity -> its grant's check
        self._revoked: dict[str, Refusal] = {}  # identity -> why, until granted again
        self.fetches = 0  # STS calls made, for tests and logs

    def role(
        self, base: Credentials, role: AssumeRole, endpoint: str | None, check: Check | None = None
    ) -> Credentials:
        """`role`'s credentials, assumed with `base` (keys, or another identity's)."""
        identity = (
            f"role:{role.role_arn}/{role.session_name}/{role.duration_seconds}/"
            f"{role.external_id or ''}|{base.identity_key()}"
        )
        return self.get(
            identity, lambda: sts.assume_role(base.current(), role, endpoint, identity), check
        )

    def web_identity(
        self, web: WebIdentity, endpoint: str | None, check: Check | None = None
    ) -> Credentials:
        """The operator's own credentials: its service-account token exchanged for its role,
        under `web`'s session (one per pool)."""
        identity = f"web:{web.role.role_arn}/{web.provider_id}/{web.role.session_name}"
        return self.get(
            identity,
            lambda: sts.assume_role_with_web_identity(
                web.provider_id, web.token(), web.role, endpoint, identity
            ),
            check,
        )

    def get(
        self, identity: str, fetch: Callable[[], Credentials], check: Check | None = None
    ) -> Credentials:
        """The identity's live credentials (renewing ones), fetched or renewed when due. The
        caller has just checked the grant (`check` asks again at every renewal): an identity
        revoked before is usable again."""
        with self._guard:
            self._fetchers[identity] = fetch
            self._revoked.pop(identity, None)
            if check is not None:
                self._checks[identity] = check
        return self._get(identity, fetch)

    def _get(self, identity: str, fetch: Callable[[], Credentials]) -> Credentials:
        with self._guard:
            lock = self._locks.setdefault(identity, threading.Lock())
        with lock:
            held = self._held.get(identity)
            now = self.clock()
            if held is None or self._due(held, now):
                held = self._renew(identity, fetch, held, now)
        return held.credentials.model_copy().renewing(lambda: self._current(identity))

    def revoke(self, identity: str, why: Refusal) -> None:
        """Drop the identity's keys at once: nothing renews or signs with them from now on."""
        with self._guard:
            self._held.pop(identity, None)
            self._fetchers.pop(identity, None)
            self._checks.pop(identity, None)
            self._revoked[identity] = why
            self._issued_to = {k: v for k, v in self._issued_to.items() if v[0] != identity}
        log.warning("credentials revoked: %s (%s)", why.reason, why.message)

    def revoked(self) -> dict[str, Refusal]:
        """The identities revoked and not granted again since (identity -> why)."""
        with self._guard:
            return dict(self._revoked)

    def recheck(self) -> dict[str, Refusal]:
        """Ask every identity's grant again; revoke those refused (identity -> why)."""
        with self._guard:
            checks = list(self._checks.items())
        revoked = {}
        for identity, check in checks:
            why = _asked(check)
            if why is not None:
                self.revoke(identity, why)
                revoked[identity] = why
        return revoked

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
        with self._guard:
            why, fetch = self._revoked.get(identity), self._fetchers.get(identity)
        if fetch is None:
            why = why or Refusal("Revoked", "the identity's credentials were dropped")
            raise Revoked(why.reason, why.message)
        return self._get(identity, fetch).model_copy()

    def _due(self, held: _Held, now: float) -> bool:
        expires = held.credentials.expires
        if expires is None:
            return False
        return now >= held.issued + RENEW_AT * (expires - held.issued)

    def _renew(
        self, identity: str, fetch: Callable[[], Credentials], held: _Held | None, now: float
    ) -> _Held:
        check = self._checks.get(identity)
        why = _asked(check) if check is not None else None
        if why is not None:  # a renewal is a new grant of keys: never past a refusal
            self.revoke(identity, why)
            raise Revoked(why.reason, why.message)
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


def _asked(check: Check) -> Refusal | None:
    try:
        return check()
    except Exception as error:  # unknown (the policies unreadable): the grant stands
        log.info("grant not checked: %s", type(error).__name__)
        return None


CREDENTIALS = CredentialCache()  # this process's one cache
