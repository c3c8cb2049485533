"""Loopback ports for the servers the local world starts (emulator, kube-apiserver, etcd, S3,
the operator's probes).

A port the kernel hands out for `bind(port 0)` comes from the ephemeral range, the same range
every outgoing connection and every Pulumi plugin's gRPC server draws from: between our probe
and the server's own bind, another process (a parallel test worker, a plugin) can take it. So
the pick comes from below that range, at random, and is checked free at that moment."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10000


def _ephemeral_start() -> int:
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A loopback port nobody listens on right now, outside the kernel's ephemeral range (the
    server binds it a moment later)."""
    top = _ephemeral_start() - 1
    if top > _LOWEST:
        for _ in range(50):
            port = random.randint(_LOWEST, top)
            if _bindable(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:  # no room below: any
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
