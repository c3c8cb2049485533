"""`spotpool_build_info{version,revision,python} 1`: which build a replica runs."""

import platform

import pytest
from prometheus_client import generate_latest
from spotpool_operator.reporting.metrics import Metrics

pytestmark = pytest.mark.unit


def test_build_info_names_the_version_the_baked_revision_and_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPOTPOOL_REVISION", "feedc0ffee12")
    text = generate_latest(Metrics().registry).decode()
    line = (
        f'spotpool_build_info{{python="{platform.python_version()}",'
        'revision="feedc0ffee12",version="0.1.0"} 1.0'
    )
    assert line in text.splitlines()
