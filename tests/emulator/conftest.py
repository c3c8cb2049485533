"""Fixtures: emulator processes for a test, each with its own state file, stopped at teardown."""

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

from tests.emulator.harness import EmulatorProcess, start_emulator


class StartEmulator(Protocol):
    def __call__(
        self,
        state: Path | None = None,
        boot_seconds: float = 1.0,
        reclaim_rate: float = 0.0,
        extra_args: list[str] | None = None,
    ) -> EmulatorProcess:
        """Start an emulator (on `state`, or on this test's own state file; `extra_args`: more
        `serve` options)."""
        ...


@pytest.fixture
def start(tmp_path: Path) -> Iterator[StartEmulator]:
    """Start emulators for this test (a restart is a second one on the same state file)."""
    started: list[EmulatorProcess] = []

    def _start(
        state: Path | None = None,
        boot_seconds: float = 1.0,
        reclaim_rate: float = 0.0,
        extra_args: list[str] | None = None,
    ) -> EmulatorProcess:
        emulator = start_emulator(
            state or tmp_path / "cloud.db",
            tmp_path / f"emulator-{len(started)}.log",
            boot_seconds=boot_seconds,
            reclaim_rate=reclaim_rate,
            extra_args=extra_args,
        )
        started.append(emulator)
        return emulator

    yield _start
    for emulator in started:
        emulator.stop()


@pytest.fixture
def emulator(start: StartEmulator) -> EmulatorProcess:
    """A fresh emulator with an empty cloud and a one-second boot delay."""
    return start()
