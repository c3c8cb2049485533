"""What the operator says at start about its Lease namespace: a missing one is a warning, none
at all means learned rates in memory only; a namespace that exists (or a refused read) is
silent."""

import logging

import kubernetes
import pytest
from spotpool_operator.process.lease_home import (
    MEMORY_ONLY,
    lease_home_problem,
    warn_about_lease_home,
)

pytestmark = pytest.mark.unit


class Core:
    def __init__(self, status: int | None) -> None:
        self.status = status

    def read_namespace(self, name: str) -> object:
        if self.status is not None:
            raise kubernetes.client.ApiException(status=self.status)
        return {"metadata": {"name": name}}


def test_a_missing_namespace_is_named_and_how_to_make_it() -> None:
    said = lease_home_problem(Core(404), "spotpool-sytem")
    assert said is not None
    assert "spotpool-sytem: no such namespace" in said
    assert "kubectl create namespace spotpool-sytem" in said


def test_no_namespace_says_the_rates_are_memory_only(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "spotpool_operator"):
        warn_about_lease_home(Core(None), None)
    assert caplog.messages == [MEMORY_ONLY]
    assert "memory only" in MEMORY_ONLY and "spotpool offerings" in MEMORY_ONLY


@pytest.mark.parametrize("status", [None, 403])
def test_an_existing_or_unreadable_namespace_is_silent(status: int | None) -> None:
    assert lease_home_problem(Core(status), "spotpool-system") is None
