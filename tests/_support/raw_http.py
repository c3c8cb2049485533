"""Raw HTTP against the local proxies (a malformed chunk, a trickle, idle connections): what any
local process could send them, byte by byte, with the proxy's memory measured in-process."""

import re
import select
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

FLOOD_CHUNK = b"\0" * 65536


@dataclass
class Flooded:
    answer: bytes  # what the proxy answered while the flood went on (b"" if nothing)
    sent: int  # bytes of the flood that went out before the proxy stopped reading
    growth: int  # the peak of traced memory over the start, in bytes


def flood_after(port: int, head: bytes, flood: int, wait: float = 10.0) -> Flooded:
    """Send `head`, then up to `flood` bytes more without ever closing (no EOF), while the
    proxy's process is traced: what it answered within `wait` seconds, and how much its memory
    grew meanwhile (the flood is one buffer sent again and again: it allocates nothing)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    start = tracemalloc.get_traced_memory()[0]
    sent = [0]
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as raw:
        raw.sendall(head)

        def keep_sending() -> None:
            try:
                while sent[0] < flood:
                    raw.sendall(FLOOD_CHUNK)
                    sent[0] += len(FLOOD_CHUNK)
            except OSError:  # the proxy closed the connection: what it should do
                pass

        sender = threading.Thread(target=keep_sending, daemon=True)
        sender.start()
        try:
            answer = raw.recv(4096)
        except (TimeoutError, ConnectionResetError):
            answer = b""
        sender.join(timeout=wait)
        peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return Flooded(answer, sent[0], peak - start)


def answer_to(port: int, data: bytes, wait: float = 5.0) -> bytes:
    """Send `data` and read the answer (its head, and its body by its Content-Length), the
    connection kept open (no EOF): b"" when the proxy says nothing within `wait` seconds (it
    waits for more)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as raw:
        raw.sendall(data)
        answer = b""
        try:
            while chunk := raw.recv(4096):
                answer += chunk
                head, found, body = answer.partition(b"\r\n\r\n")
                length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                if found and len(body) >= (int(length.group(1)) if length else 0):
                    break
        except (TimeoutError, ConnectionResetError):
            pass
        return answer


def trickle(port: int, data: bytes, every: float, until: float) -> float | None:
    """Send `data` one byte each `every` seconds (each well within the proxy's wait for a byte):
    the seconds after which the proxy closed the connection, or None if it was still open
    `until` seconds later."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=until) as raw:
        for i in range(len(data)):
            if time.monotonic() - started > until:
                return None
            try:
                raw.sendall(data[i : i + 1])
            except OSError:
                return time.monotonic() - started
            readable, _, _ = select.select([raw], [], [], every)
            if readable:
                try:
                    if raw.recv(4096, socket.MSG_PEEK) == b"":
                        return time.monotonic() - started
                except OSError:
                    return time.monotonic() - started
    return None


@contextmanager
def idle_connections(port: int, count: int) -> Iterator[list[socket.socket]]:
    """`count` connections to the proxy that send nothing."""
    opened = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(count)]
    try:
        yield opened
    finally:
        for connection in opened:
            connection.close()
