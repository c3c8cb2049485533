"""No long-lived keys, end to end: a real kube-apiserver, the operator process, real Pulumi runs
and the tencentcloud provider against the emulator's STS.

- a pool launched into account B through a role assumed with account A's keys (instances in B,
  none in A); a role whose trust policy does not name A: a condition saying what to fix;
- a pool with no Secret at all: the operator's service-account token (issued by this cluster,
  whose issuer the emulator's CAM trusts) exchanged for a role of account C;
- a revoked trust policy: once the held keys run out, a condition saying what to fix, nothing
  leaked;
- after it all, no key, token or temporary credential in any file of the world, nor in any
  Event or status.
"""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spotpool.cluster.oidc import ISSUER, STS_AUDIENCE, cluster_jwks
from spotpool.localworld.emulator import SECRET_KEY
from spotpool.localworld.kube import Kube
from spotpool.localworld.operator import OperatorWorld, pool_manifest
from tests.e2e.conftest import operator_world
from tests.sts_world import ACCOUNT_A, ACCOUNT_B, ACCOUNT_C, ROLE_B, configure, role

pytestmark = pytest.mark.e2e
PROVIDER = "local-cluster"
SERVICE_ACCOUNT = ("default", "spotpool-operator")
OPERATOR_ROLE = f"qcs::cam::uin/{ACCOUNT_C}:roleName/spotpool-operator"
UNTRUSTED_ROLE = f"qcs::cam::uin/{ACCOUNT_B}:roleName/someone-elses"
REVOCABLE_ROLE = f"qcs::cam::uin/{ACCOUNT_B}:roleName/revocable"
LIFE_SECONDS = 60  # the emulator's cap on every temporary key's life


class CredentialWorld:
    def __init__(self, operator: OperatorWorld, token_file: Path) -> None:
        self.operator = operator
        self.token_file = token_file

    def accounts_of(self, uid: str) -> dict[str, str]:
        """Account of every live instance of the pool `uid`, by id."""
        live = self.operator.cloud(uid)
        return {
            i["InstanceId"]: i["Account"]
            for i in self.operator.emulator.all_instances()
            if i["InstanceId"] in live
        }


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CredentialWorld]:
    # The operator's own service-account token, for STS, as a projected volume would hold it.
    namespace, name = SERVICE_ACCOUNT
    kube.run("-n", namespace, "create", "serviceaccount", name)
    token = kube.ok(
        "-n", namespace, "create", "token", name, f"--audience={STS_AUDIENCE}", "--duration=2h"
    ).strip()
    token_file = tmp_path_factory.mktemp("identity") / "token"
    token_file.write_text(token)
    env = {
        "TKE_ROLE_ARN": OPERATOR_ROLE,
        "TKE_PROVIDER_ID": PROVIDER,
        "TKE_WEB_IDENTITY_TOKEN_FILE": str(token_file),
    }
    with operator_world(kube, tmp_path_factory.mktemp("credentials"), env=env) as operator:
        configure(
            operator.emulator,
            OidcProviders=[
                {
                    "Name": PROVIDER,
                    "Issuer": ISSUER,
                    "ClientIds": [STS_AUDIENCE],
                    "Jwks": cluster_jwks(kube.kubeconfig.parent),
                }
            ],
            Roles=[
                role(trusted_accounts=[ACCOUNT_A]),
                role(name="someone-elses", trusted_accounts=[ACCOUNT_C]),
                role(name="revocable", trusted_accounts=[ACCOUNT_A]),
                role(
                    account=ACCOUNT_C,
                    name="spotpool-operator",
                    subjects=[f"system:serviceaccount:{namespace}:{name}"],
                    issuer=ISSUER,
                ),
            ],
            MaxLifetimeSeconds=LIFE_SECONDS,
        )
        yield CredentialWorld(operator, token_file)


def _condition_with(
    operator: OperatorWorld, namespace: str, name: str, reason: str
) -> dict[str, Any] | None:
    for condition in operator.status(namespace, name).get("conditions") or []:
        if condition.get("reason") == reason:
            return dict(condition)
    return None


def test_a_pool_launches_into_account_b_through_a_role_assumed_with_as_keys(
    world: CredentialWorld,
) -> None:
    operator = world.operator
    namespace = operator.namespace()  # its Secret holds account A's keys
    operator.apply(
        namespace,
        pool_manifest("gpu", minimum=2, assumeRole={"roleArn": ROLE_B, "sessionName": "e2e"}),
    )
    pool = operator.wait_ready(namespace, "gpu", 2)
    accounts = world.accounts_of(pool["metadata"]["uid"])
    assert len(accounts) == 2 and set(accounts.values()) == {ACCOUNT_B}


def test_a_role_that_does_not_trust_the_caller_is_a_condition_saying_what_to_fix(
    world: CredentialWorld,
) -> None:
    operator = world.operator
    namespace = operator.namespace()
    operator.apply(namespace, pool_manifest("gpu", assumeRole={"roleArn": UNTRUSTED_ROLE}))
    found = operator.wait_until(
        lambda: _condition_with(operator, namespace, "gpu", "RoleNotTrusted"),
        "a RoleNotTrusted condition",
    )
    assert "trust policy" in found["message"] and UNTRUSTED_ROLE in found["message"]
    assert ACCOUNT_A in found["message"]  # who was refused
    uid = operator.get(namespace, "gpu")["metadata"]["uid"]  # type: ignore[index]
    assert operator.cloud(uid) == {}
    assert operator.alive()


def test_a_pool_with_no_secret_runs_as_the_operators_own_identity(
    world: CredentialWorld,
) -> None:
    operator = world.operator
    namespace = f"{operator.namespace_prefix}noscrt"
    operator.kube.ok("create", "namespace", namespace)
    operator.namespaces.append(namespace)
    manifest = pool_manifest("gpu", minimum=1, useOperatorIdentity=True)
    del manifest["spec"]["credentialsSecretRef"]
    operator.apply(namespace, manifest)
    pool = operator.wait_ready(namespace, "gpu", 1)
    assert set(world.accounts_of(pool["metadata"]["uid"]).values()) == {ACCOUNT_C}
    assert operator.kube.ok("-n", namespace, "get", "secrets", "-o", "name").strip() == ""


def test_a_revoked_trust_policy_becomes_a_condition_and_nothing_leaks(
    world: CredentialWorld,
) -> None:
    operator = world.operator
    namespace = operator.namespace()
    operator.apply(namespace, pool_manifest("gpu", minimum=1, assumeRole={
        "roleArn": REVOCABLE_ROLE}))  # fmt: skip
    pool = operator.wait_ready(namespace, "gpu", 1)
    uid = pool["metadata"]["uid"]
    before = operator.cloud(uid)
    configure(operator.emulator, Roles=[role(name="revocable", trusted_accounts=[])])
    # The keys already held stay good until they expire (as the cloud honours them); then
    # every renewal is refused, and the pool's next check says so.
    found = operator.wait_until(
        lambda: _condition_with(operator, namespace, "gpu", "RoleNotTrusted"),
        "a RoleNotTrusted condition after the revocation",
        timeout=LIFE_SECONDS * 3,
    )
    assert REVOCABLE_ROLE in found["message"] and "trust policy" in found["message"]
    assert operator.cloud(uid) == before  # nothing launched, nothing lost
    assert operator.alive()


def test_no_key_token_or_temporary_credential_anywhere_in_the_world(
    world: CredentialWorld,
) -> None:
    operator = world.operator
    issued = operator.emulator.admin_ok("GET", "/_emulator/iam/issued")["Issued"]
    assert issued, "the e2e obtained no temporary keys"
    secrets = {SECRET_KEY, world.token_file.read_text().strip()}
    for key in issued:
        secrets |= {key["SecretId"], key["SecretKey"], key["Token"]}
    # This world's namespaces only: other modules on this cluster may hold the article's
    # manifest, whose keys are inline in its spec by design (an InlineCredentials warning).
    texts = {
        f"{kind} in {namespace}": operator.kube.ok("-n", namespace, "get", kind, "-o", "json")
        for namespace in operator.namespaces
        for kind in ("events", "spotpools")
    }
    for path in operator.directory.rglob("*"):
        if path.is_file():
            texts[str(path)] = path.read_bytes().decode("latin-1")
    leaks = [
        (where, secret[:6] + "...")
        for where, text in texts.items()
        for secret in secrets
        if secret in text
    ]
    assert leaks == [], f"credentials found in {json.dumps(leaks)}"
    assert len(texts) > 20  # the operator's log, Pulumi's state and workspaces were searched
