"""spec.operatorClass: every kopf handler of an install filters on its class, and the finalizer
is the class's own (tests/e2e/test_operator_class.py runs two installs side by side)."""

from pathlib import Path
from typing import Any

import kopf
import pytest
from pydantic import ValidationError
from spotpool_operator.process import handlers
from spotpool_operator.process.cli import app
from typer.testing import CliRunner

from tests.operator.fakes import make_world, pool_body, settings

pytestmark = pytest.mark.unit


def _filters(operator_class: str, tmp_path: Path) -> dict[str, list[Any]]:
    world = make_world(tmp_path, operator_class=operator_class)
    registry = kopf.OperatorRegistry()
    handlers.register(registry, world.reconciler)
    found: dict[str, list[Any]] = {}
    for handler in [*registry._changing.get_all_handlers(), *registry._spawning.get_all_handlers()]:
        found.setdefault(str(handler.id), []).append(handler.when)
    return found


@pytest.mark.parametrize("operator_class", ["", "blue"])
def test_every_handler_serves_only_pools_of_its_class(operator_class: str, tmp_path: Path) -> None:
    filters = _filters(operator_class, tmp_path)
    assert set(filters) == {"converge", "converge/spec", "delete", "reclaims"}
    for klass in ("", "blue", "green"):
        spec: dict[str, Any] = {"operatorClass": klass} if klass else {}
        body = pool_body(**spec)
        for when in (w for ws in filters.values() for w in ws):
            assert when is not None
            assert when(body=body) == (klass == operator_class), (operator_class, klass)


def test_a_pool_of_another_class_is_logged_as_left_alone_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (when, *_) = _filters("blue", tmp_path)["delete"]
    assert when is not None
    green = pool_body(operatorClass="green")
    with caplog.at_level("INFO", logger="spotpool_operator.handlers"):
        for _ in range(3):  # every event of the pool asks again
            assert when(body=green) is False
        assert when(body=pool_body(operatorClass="blue")) is True
    said = [r.getMessage() for r in caplog.records if "left to its install" in r.getMessage()]
    assert said == ["pool team-a/gpu is of operator class 'green', not 'blue': left to its install"]


def test_the_finalizer_is_the_classs_own() -> None:
    named = {}
    for operator_class in ("", "blue"):
        kopf_settings = kopf.OperatorSettings()
        handlers.configure(kopf_settings, None, operator_class)
        named[operator_class] = kopf_settings.persistence.finalizer
    assert named == {
        "": "devops.jokerbai.com/finalizer",  # as before classes
        "blue": "devops.jokerbai.com/finalizer-blue",
    }


def test_the_class_is_a_dns_label(tmp_path: Path) -> None:
    assert settings(tmp_path, operator_class="team-a1").operator_class == "team-a1"
    for bad in ("Team", "-a", "a_b", "a" * 41):
        with pytest.raises(ValidationError):
            settings(tmp_path, operator_class=bad)


def test_the_flag_is_in_the_cli_help() -> None:
    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert "--operator-class" in result.output and "SPOTPOOL_OPERATOR_CLASS" in result.output
