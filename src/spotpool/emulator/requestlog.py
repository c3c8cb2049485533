"""The request log (`/_emulator/requests`): every API call, with its parameters as kept
(secrets fingerprinted), and its line on stderr."""

import hashlib
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("spotpool.emulator")

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


@dataclass(frozen=True)
class Call:
    """One API call as it arrived: what its log line and request-log entry name."""

    arrived: float  # epoch seconds
    started: float  # perf_counter, for the time it took
    request_id: str
    action: str
    region: str
    client: str  # the SDK's X-TC-RequestClient


class RequestLog:
    """The newest API calls (`/_emulator/requests`), each also one line on stderr — never a
    key."""

    def __init__(self, size: int = REQUEST_LOG_SIZE) -> None:
        self.calls: deque[dict[str, Any]] = deque(maxlen=size)

    def add(
        self,
        call: Call,
        service: str,
        code: str,
        params: dict[str, Any] | None,
        lost: list[str] | None = None,
        caller: str | None = None,
    ) -> None:
        """Log `call`; `lost`: it took effect on these instances, but its answer was lost;
        `caller`: the ARN of who signed it (an assumed role's names its session), kept in the
        request log only."""
        entry = {
            "Time": call.arrived,
            "Service": service,
            "Action": call.action or "-",
            "Region": call.region,
            "Code": code,
            "Client": call.client,
            "Params": recorded(params),
        }
        if lost is not None:
            entry["AnswerLost"] = True
        if caller is not None:
            entry["Caller"] = caller
        self.calls.append(entry)
        log.info(
            "action=%s.%s region=%s code=%s ms=%.1f request_id=%s%s",
            service,
            call.action or "-",
            call.region,
            code,
            (time.perf_counter() - call.started) * 1000,
            call.request_id,
            "" if lost is None else f" answer=lost instances={','.join(lost) or '-'}",
        )
