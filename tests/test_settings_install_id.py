"""`spotpool preview` builds its engine settings from the environment: with the operator's
SPOTPOOL_INSTALL_ID it tags instances as the operator does (without it, every instance of an
install named by its Lease showed a tag update in the preview, which no `up` makes)."""

import pytest

from spotpool.engine.basics.settings import EngineSettings

pytestmark = pytest.mark.unit


def test_the_install_id_comes_from_the_operators_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setenv("SPOTPOOL_PASSPHRASE", "a-passphrase-long-enough")
    monkeypatch.setenv("SPOTPOOL_WORK_DIR", str(tmp_path))
    monkeypatch.delenv("SPOTPOOL_INSTALL_ID", raising=False)
    assert EngineSettings.from_env().install_id == "default"
    monkeypatch.setenv("SPOTPOOL_INSTALL_ID", "spotpool-system.spotpool-operator")
    assert EngineSettings.from_env().install_id == "spotpool-system.spotpool-operator"
