"""Cloud credentials, held as secrets and handed to the provider only as environment variables.

A key pair may be temporary (STS: a token comes with it, and an expiry). Temporary credentials
obtained through a role or the operator's own identity know how to renew themselves
(`current`), so whoever holds them — a fleet probe's group, a stray sweep — signs with keys
that are alive; a Pulumi run that outlives them is re-signed by the API proxy (api_proxy.py).
"""

import hashlib
from collections.abc import Callable

from pydantic import BaseModel, PrivateAttr, SecretStr


class Credentials(BaseModel):
    secret_id: SecretStr
    secret_key: SecretStr
    token: SecretStr | None = None  # STS temporary keys only
    expires: float | None = None  # epoch seconds; None: a permanent key pair
    # The account the calls land in, when known (an assumed role's): rate-limit buckets and
    # metrics are the account's, whichever temporary key signs.
    account: str | None = None
    # What stays the same across renewals (the identity, not this key pair).
    identity: str | None = None
    _renew: Callable[[], "Credentials"] | None = PrivateAttr(default=None)

    def provider_env(self) -> dict[str, str]:
        """The tencentcloud provider reads these when its config names no keys."""
        current = self.current()
        env = {
            "TENCENTCLOUD_SECRET_ID": current.secret_id.get_secret_value(),
            "TENCENTCLOUD_SECRET_KEY": current.secret_key.get_secret_value(),
        }
        if current.token is not None:
            env["TENCENTCLOUD_SECURITY_TOKEN"] = current.token.get_secret_value()
        return env

    @property
    def temporary(self) -> bool:
        return self.token is not None or self._renew is not None

    def renewing(self, renew: Callable[[], "Credentials"]) -> "Credentials":
        """These credentials, told where their successors come from."""
        self._renew = renew
        return self

    def current(self) -> "Credentials":
        """Credentials alive now: these, or their renewal (renewable ones only)."""
        return self._renew() if self._renew is not None else self

    def bucket_owner(self) -> str:
        """Whose rate limit a call spends: the account when known, else the SecretId (the
        real API counts per account; a key pair stands for its account)."""
        return self.account or self.secret_id.get_secret_value()

    def identity_key(self) -> str:
        """Stable across renewals: groups calls of one identity (fleet probe, caches)."""
        if self.identity is not None:
            return self.identity
        secret = self.secret_key.get_secret_value().encode()
        return self.secret_id.get_secret_value() + hashlib.sha256(secret).hexdigest()[:16]
