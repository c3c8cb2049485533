"""The engine's world built once: an emulator process standing in for Tencent Cloud, engine
settings on a backend URL (a directory or an S3 server), the emulator's credentials."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pydantic import SecretStr

from spotpool.cluster import s3
from spotpool.engine.basics.settings import EngineSettings
from spotpool.engine.tencent.credentials import Credentials
from spotpool.localworld.engine import EngineWorld
from tests.emulator.harness import SECRET_ID, SECRET_KEY, start_emulator


@contextmanager
def engine_world(
    directory: Path, backend_url: str, orphan_min_age: float = 0.0
) -> Iterator[EngineWorld]:
    """An emulator (instances boot at once) and the engine's settings pointing at it, on
    `backend_url`; the emulator stops on the way out. `orphan_min_age` 0: the tests make their
    strays by hand a moment before the sweep, so no in-flight create is theirs."""
    emulator = start_emulator(directory / "cloud.db", directory / "emulator.log", boot_seconds=0)
    settings = EngineSettings(
        backend_url=backend_url,
        passphrase=SecretStr("engine-tests-passphrase"),
        work_root=directory / "workspaces",
        cloud_endpoint=emulator.endpoint,
        orphan_min_age=orphan_min_age,
    )
    (directory / "backend").mkdir(exist_ok=True)
    credentials = Credentials(secret_id=SecretStr(SECRET_ID), secret_key=SecretStr(SECRET_KEY))
    try:
        yield EngineWorld(emulator, settings, credentials, [])
    finally:
        emulator.stop()


def s3_backend(server: s3.LocalS3, monkeypatch: pytest.MonkeyPatch) -> str:
    """The server's keys in the environment (Pulumi's runs inherit them, as in a pod); its URL."""
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    return server.backend_url
