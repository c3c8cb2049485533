"""The local world's ports come from outside the kernel's ephemeral range, where no plugin's or
client's `bind(0)` can take them between our pick and the server's bind."""

import socket

import pytest

from spotpool.ports import _ephemeral_start, free_port

pytestmark = pytest.mark.unit


def test_a_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    ports = {free_port() for _ in range(20)}
    assert all(10000 <= port < _ephemeral_start() for port in ports), ports
    assert len(ports) > 10  # random picks, not one port for every caller
    with socket.socket() as server:
        server.bind(("127.0.0.1", ports.pop()))


def test_a_port_in_use_is_never_picked() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        busy = taken.getsockname()[1]
        assert all(free_port() != busy for _ in range(200))
