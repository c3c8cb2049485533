"""What the request log (`/_emulator/requests`) keeps of each API call's parameters."""

import hashlib
from typing import Any

REQUEST_LOG_SIZE = 100_000  # the newest API calls kept for /_emulator/requests


def recorded(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """A request's parameters as the request log keeps them: a login password (never kept by
    the emulated cloud either) only as its SHA-256, so equal passwords still compare equal; a web
    identity token likewise."""
    if params and isinstance(params.get("WebIdentityToken"), str):  # a bearer credential
        token = params["WebIdentityToken"].encode()
        params = {**params, "WebIdentityToken": f"sha256:{hashlib.sha256(token).hexdigest()}"}
    login = (params or {}).get("LoginSettings")
    if not isinstance(login, dict) or not isinstance(login.get("Password"), str):
        return params
    digest = hashlib.sha256(login["Password"].encode()).hexdigest()
    return {**(params or {}), "LoginSettings": {**login, "Password": f"sha256:{digest}"}}
