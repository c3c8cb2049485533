"""The API proxy's leg to the cloud: one handler thread's connections, and how a call is sent
again when its answer does not come (write_safety.Kind).

- A read is sent again on a connection error (a kept-alive connection the far end had closed,
  most often), a 5xx, InternalError or RequestLimitExceeded, up to `READ_TRIES` times, each
  repeat taking its rate token: one bad answer does not fail a whole Pulumi run.
- A create carries its ClientToken: sent again with it, after a pause, on a lost answer, a
  5xx or InternalError, up to `CREATE_TRIES` times — the cloud answers a repeat with the same
  instance. A write whose repeat the cloud takes as the same (tags, a name, a termination)
  likewise: the same again is the same.
- Any other write goes on a fresh connection (a kept-alive one may have been closed under it,
  and then nobody can tell whether the request was read), and is sent again only when the
  connection could not even be opened: it provably never left. An answer lost after that is
  the caller's 502.
"""

import dataclasses
import http.client
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

from spotpool.engine.tencent.recent_writes import RECENT
from spotpool.engine.tencent.write_safety import (
    Kind,
    asked_ids,
    listed_ids,
    retry_repeatable,
    without_stale,
)

UPSTREAM_TIMEOUT = 120.0
CREATE_TRIES = 6  # a create's sends at most, one token: ~6 s of pauses in all
FIRST_PAUSE = 0.2
READ_TRIES = 4  # a read's sends at most: throttled, failed or unanswered, it is asked again
CATCH_UP_FOR = 30.0  # seconds a DescribeInstances waits for a launch to be listed, a call


_TRIES = {Kind.CREATE: CREATE_TRIES, Kind.IDEMPOTENT: CREATE_TRIES, Kind.READ: READ_TRIES,
          Kind.WRITE: 2}  # fmt: skip


@dataclass(frozen=True)
class Reply:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    data: bytes
    repeated: bool = False  # sent again after an earlier send that may have taken effect


class Lost(Exception):
    """The request may have reached the cloud, and no answer came back."""


class Upstreams:
    """One handler thread's connections, reused across its client's keep-alive requests."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], http.client.HTTPConnection] = {}

    def connection(self, scheme: str, host: str) -> http.client.HTTPConnection:
        found = self._open.get((scheme, host))
        if found is None:
            if scheme == "https":
                found = http.client.HTTPSConnection(
                    host, timeout=UPSTREAM_TIMEOUT, context=ssl.create_default_context()
                )
            else:
                found = http.client.HTTPConnection(host, timeout=UPSTREAM_TIMEOUT)
            self._open[(scheme, host)] = found
        return found

    def drop(self, scheme: str, host: str) -> None:
        found = self._open.pop((scheme, host), None)
        if found is not None:
            found.close()

    def close(self) -> None:
        for connection in self._open.values():
            connection.close()
        self._open.clear()

    def exchange(
        self,
        kind: Kind,
        destination: tuple[str, str, str],
        method: str,
        headers: list[tuple[str, str]],
        body: bytes,
        again: Callable[[], bool],
    ) -> Reply:
        """Send the request and read its answer, sending it again only as `kind` allows;
        `again()` is asked before every repeat (the fence, the rate token) and stops them
        when False. Raises Lost when the last send went out and no answer came."""
        scheme, host, target = destination
        repeatable = kind is not Kind.WRITE
        tries = _TRIES[kind]
        pause = FIRST_PAUSE
        unsure = False  # an earlier send went out and its answer did not come back
        for attempt in range(1, tries + 1):
            if kind is Kind.WRITE:
                self.drop(scheme, host)  # a fresh connection: a failure to open it is provable
            connection = self.connection(scheme, host)
            try:
                if connection.sock is None:
                    connection.connect()
            except OSError as error:  # never left: any kind may be sent again
                self.drop(scheme, host)
                if attempt == tries or not again():
                    raise Lost(f"upstream {host}: {type(error).__name__}") from None
                continue
            try:
                reply = _send(connection, method, target, headers, body)
            except (OSError, http.client.HTTPException) as error:
                self.drop(scheme, host)
                unsure = True
                if kind is Kind.WRITE or attempt == tries or not again():
                    raise Lost(f"upstream {host}: {type(error).__name__}") from None
                if repeatable:
                    time.sleep(pause)
                    pause = min(2.0, pause * 2)
                continue
            if repeatable and attempt < tries and retry_repeatable(reply.status, reply.data):
                if not again():
                    return dataclasses.replace(reply, repeated=unsure)
                unsure = True  # a 5xx or InternalError: it may have acted
                time.sleep(pause)
                pause = min(2.0, pause * 2)
                continue
            return dataclasses.replace(reply, repeated=unsure)
        raise AssertionError("unreachable")  # pragma: no cover

    def caught_up(
        self,
        reply: Reply,
        destination: tuple[str, str, str],
        method: str,
        headers: list[tuple[str, str]],
        body: bytes,
        again: Callable[[], bool],
    ) -> Reply:
        """Read-your-writes for a DescribeInstances answer: asked again while it misses an
        instance this process launched that no listing has shown yet (within RECENT's bound,
        `CATCH_UP_FOR` seconds a call); instances it terminated a moment ago are left out."""
        deadline = time.monotonic() + CATCH_UP_FOR
        pause = 0.25
        while True:
            listed = listed_ids(reply.data)
            RECENT.listed(listed)
            missing = RECENT.unlisted(set(asked_ids(body)) - set(listed))
            if not missing or time.monotonic() + pause > deadline or not again():
                break
            time.sleep(pause)
            pause = min(2.0, pause * 2)
            reply = self.exchange(Kind.READ, destination, method, headers, body, again)
            if reply.status != 200:
                return reply
        return dataclasses.replace(
            reply, data=without_stale(reply.data, RECENT.terminated_recently)
        )


def _send(
    connection: http.client.HTTPConnection,
    method: str,
    target: str,
    headers: list[tuple[str, str]],
    body: bytes,
) -> Reply:
    connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
    for name, value in headers:
        connection.putheader(name, value)
    connection.putheader("Content-Length", str(len(body)))
    connection.endheaders(body)
    answer = connection.getresponse()
    data = answer.read()
    return Reply(answer.status, answer.reason, answer.getheaders(), data)
