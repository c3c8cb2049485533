"""`spotpool stacks orphaned` (issue 48, build 5): the stacks of the backend whose pool is no
longer in the cluster, with the instances they hold — held, so never swept, and converged by
no one — read from the backend's files."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotpool.engine.stacks.orphaned import orphaned

pytestmark = pytest.mark.unit
SLOT = "tencentcloud:Instance/instance:Instance"


def _stack(root: Path, name: str, *ids: str) -> None:
    resources = [{"type": SLOT, "id": i, "urn": f"urn:{i}"} for i in ids]
    body = {"checkpoint": {"latest": {"resources": resources}}}
    (root / f"{name}.json").write_text(json.dumps(body))


def test_a_stack_without_its_pool_is_listed_with_what_it_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stacks = tmp_path / ".pulumi" / "stacks" / "spotpool"
    stacks.mkdir(parents=True)
    (tmp_path / ".pulumi" / "meta.yaml").write_text("version: 1\n")
    _stack(stacks, "team-a.live", "ins-1")
    _stack(stacks, "team-a.gone", "ins-3", "ins-2")
    url = f"file://{tmp_path}"
    assert orphaned(url, {"team-a.live"}) == {"team-a.gone": ["ins-2", "ins-3"]}
    assert orphaned(url, {"team-a.live", "team-a.gone"}) == {}

    from spotpool import stacks_cli

    monkeypatch.setenv("SPOTPOOL_PASSPHRASE", "unused-here-0123456789")
    monkeypatch.setattr(stacks_cli, "live_pool_stacks", lambda kubeconfig: {"team-a.live"})
    result = CliRunner().invoke(stacks_cli.app, ["orphaned", "--backend", url])
    assert result.exit_code == 1 and "team-a.gone\t2 instance(s)\tins-2 ins-3" in result.output
    (stacks / "team-a.gone.json").write_text("{not json")  # a read that fails: no verdict
    assert orphaned(url, {"team-a.live"}) is None
