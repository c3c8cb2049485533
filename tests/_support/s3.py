"""The local S3 server (versitygw) the shared-backend tests run on, started and stopped in one
place: a missing versitygw fails the test (never skips it)."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from spotpool.cluster import s3
from tests._support.tools import require_tool


@contextmanager
def local_s3(directory: Path) -> Iterator[s3.LocalS3]:
    """versitygw serving `directory` on loopback, with its bucket made; stopped on the way out."""
    require_tool("versitygw")
    server = s3.start(directory)
    try:
        yield server
    finally:
        server.stop()
