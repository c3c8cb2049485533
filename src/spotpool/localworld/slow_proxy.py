"""A TCP proxy on 127.0.0.1 in front of the API server for one replica, that can stall (hold
every byte both ways, connections left open, as a brownout or a partition does) or slow (each
chunk delayed) that replica's connection alone; and a kubeconfig that goes through it."""

import re
import select
import socket
import threading
import time
from pathlib import Path


class StallProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.stalled = threading.Event()
        self.delay = 0.0  # seconds added to every chunk forwarded
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closing = threading.Event()
        threading.Thread(target=self._accept, name="stall-proxy", daemon=True).start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        peers = {client: upstream, upstream: client}
        try:
            while not self._closing.is_set():
                if self.stalled.is_set():  # hold everything; the connection stays open
                    time.sleep(0.05)
                    continue
                ready, _, _ = select.select(list(peers), [], [], 0.1)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if self.delay:
                        time.sleep(self.delay)
                    while self.stalled.is_set() and not self._closing.is_set():
                        time.sleep(0.05)  # stalled mid-flight: held, then delivered
                    peers[sock].sendall(data)
        except OSError:
            return
        finally:
            client.close()
            upstream.close()

    def kubeconfig(self, original: Path, into: Path) -> Path:
        """A copy of `original` whose server is this proxy (same TLS: 127.0.0.1 either way)."""
        text = original.read_text()
        proxied = re.sub(r"(server:\s*https://127\.0\.0\.1:)\d+", rf"\g<1>{self.port}", text)
        if proxied == text:
            raise ValueError("the kubeconfig names no 127.0.0.1 server")
        into.write_text(proxied)
        return into

    def close(self) -> None:
        self._closing.set()
        self._listener.close()


def target_of(kubeconfig: Path) -> tuple[str, int]:
    found = re.search(r"server:\s*https://(127\.0\.0\.1):(\d+)", kubeconfig.read_text())
    if not found:
        raise ValueError("the kubeconfig names no 127.0.0.1 server")
    return found[1], int(found[2])
