"""kubectl against a local (or any) cluster, by kubeconfig: how the local world's users act.

A harness's wait reads an object every half second: through kubectl that is a Go process a
read (~65 ms of CPU, thousands a test run on two cores), so `read` asks the API server itself
over one kept connection, with the same kubeconfig. Everything a user types stays kubectl.
"""

import contextlib
import json
import os
import subprocess
import threading
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3


@dataclass
class Kube:
    kubeconfig: Path
    kubectl: Path
    _client: Any = field(default=None, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False,
                                  compare=False)  # fmt: skip

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        return subprocess.run(
            [str(self.kubectl), *args],
            input=stdin,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        result = self.run(*args, stdin=stdin)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def delete_namespaces(self, namespaces: Iterable[str], pools_path: str) -> None:
        """Delete a test world's namespaces once its operator is gone: the Spotpools left in
        them lose the finalizer no one will take off now (`pools_path`: the API path of the
        Spotpools, {namespace} in it). Left, each namespace would stay Terminating, and the
        namespace controller would list every kind in it again and again for the rest of the
        run (27 such namespaces were a third of the API servers' load)."""
        for namespace in namespaces:
            self.run("delete", "namespace", namespace, "--wait=false")
            with contextlib.suppress(AssertionError):
                listed = self.read(pools_path.format(namespace=namespace)) or {}
                names = [f"spotpool/{p['metadata']['name']}" for p in listed.get("items") or []
                         if p["metadata"].get("finalizers")]  # fmt: skip
                if names:
                    self.run("-n", namespace, "patch", *names, "--type=merge",
                             "-p", '{"metadata":{"finalizers":null}}')  # fmt: skip

    def read(self, path: str, **query: str) -> dict[str, Any] | None:
        """GET an API path (`/apis/<group>/<version>/namespaces/<ns>/<plural>/<name>`) as
        JSON; None when the object does not exist (404), any other failure raised."""
        host, pool, headers = self._api()
        url = f"{host}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        try:
            reply = pool.request("GET", url, headers=headers, timeout=30.0, retries=False)
        except urllib3.exceptions.HTTPError as error:  # as kubectl's failure would be
            raise AssertionError(f"GET {path}: {error}") from None
        if reply.status == 404:
            return None
        if reply.status != 200:
            raise AssertionError(f"GET {path}: {reply.status} {reply.data[:300]!r}")
        found: dict[str, Any] = json.loads(reply.data)
        return found

    def _api(self) -> tuple[str, urllib3.PoolManager, dict[str, str]]:
        """The kubeconfig's server, a kept connection pool with its TLS and its credentials;
        read again when the file changes (a cluster restarted on another port rewrites it)."""
        stat = self.kubeconfig.stat()
        version = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        with self._lock:
            if self._client is None or self._client[0] != version:
                from kubernetes import client, config

                settings = client.Configuration()
                config.load_kube_config(str(self.kubeconfig), client_configuration=settings)  # type: ignore[no-untyped-call]
                pool = urllib3.PoolManager(
                    cert_reqs="CERT_REQUIRED" if settings.verify_ssl else "CERT_NONE",
                    ca_certs=settings.ssl_ca_cert, cert_file=settings.cert_file,
                    key_file=settings.key_file, maxsize=4,
                )  # fmt: skip
                headers = {"Accept": "application/json"}
                token = settings.api_key.get("authorization") or settings.api_key.get("BearerToken")
                if token:
                    headers["Authorization"] = token
                self._client = (version, (settings.host, pool, headers))
            return self._client[1]  # type: ignore[no-any-return]
