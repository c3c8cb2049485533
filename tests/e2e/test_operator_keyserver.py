"""The operator with the `keyserver` secrets provider (engine/state/keyserver.py): its stacks' data
keys are served on loopback by the operator process itself, so a replacement pod — another
hostname, another key service address and token — must open the same stacks from the
passphrase alone."""

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotpool.engine.state import keyserver
from spotpool.localworld.kube import Kube
from tests.e2e._support.operator_runs import killed_mid_up_and_replaced_under_another_hostname
from tests.e2e.conftest import operator_world
from tests.operator.world import OperatorWorld

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def keyserver_world(
    kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorWorld]:
    directory = tmp_path_factory.mktemp("operator-keyserver")
    with operator_world(
        kube, directory, namespace_prefix="ks-", env={"SPOTPOOL_SECRETS_PROVIDER": "keyserver"}
    ) as world:
        yield world


def test_killed_mid_up_and_replaced_under_another_hostname_with_the_keyserver(
    keyserver_world: OperatorWorld,
) -> None:
    killed_mid_up_and_replaced_under_another_hostname(keyserver_world)
    backend = keyserver_world.directory / "backend"
    (checkpoint,) = [p for p in backend.rglob("*.moved.json.gz")]
    latest = json.loads(gzip.decompress(checkpoint.read_bytes()))["checkpoint"]["latest"]
    assert latest["secrets_providers"]["type"] == "cloud"
    assert latest["secrets_providers"]["state"]["url"] == keyserver.URL
    settings = next(Path(keyserver_world.directory / "workspaces").rglob("Pulumi.*.moved.yaml"))
    assert f"secretsprovider: {keyserver.URL}" in settings.read_text()
    log = keyserver_world.log.read_text(errors="replace")
    assert _unmasked_tokens(log) == [], "the key service's token is in the operator's log"


def _unmasked_tokens(log: str) -> list[str]:
    """Every value the log gives the key service's token (VAULT_TOKEN=..., X-Vault-Token: ...,
    quoted or not) that is not the mask: one unmasked line fails, whatever others say."""
    values = re.findall(
        r"vault[_-]token\\*[\"']?\s*[:=]\s*\\*[\"']?([^\s\"'\\,;&})\]]*)", log, re.IGNORECASE
    )
    return [value for value in values if value != "***"]


def test_the_token_check_fails_on_one_unmasked_line() -> None:
    assert _unmasked_tokens("VAULT_TOKEN=*** ok\nenv VAULT_TOKEN=kst-a1 pulumi up") == ["kst-a1"]
    assert _unmasked_tokens('{"X-Vault-Token": "kst-b2"} VAULT_TOKEN=***') == ["kst-b2"]
    assert _unmasked_tokens("VAULT_TOKEN=*** and {'VAULT_TOKEN': '***'}") == []
    # Any case, either separator (before: x-vault-token and vault_token= passed as clean).
    assert _unmasked_tokens("x-vault-token: kst-c3") == ["kst-c3"]
    assert _unmasked_tokens("GET /v1?vault_token=kst-d4 X-VAULT-TOKEN: ***") == ["kst-d4"]
