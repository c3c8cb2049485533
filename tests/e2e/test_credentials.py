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

Every pool here is in a namespace that a SpotpoolAccessPolicy grants what it uses (team A's:
the roles, the operator's identity, the external id sent). Team B's policy grants one role of
its own and limits its namespace to 2 instances: team B is refused team A's role and the
operator's identity at `kubectl apply` (the chart's ValidatingAdmissionPolicy) and, where
admission did not stop it, by the operator; a Secret that did not opt in is refused as if it
did not exist; and a pool that would pass the limit is held at it.
"""

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from spotpool_deploy import chart

from spotpool.cluster.oidc import ISSUER, STS_AUDIENCE, cluster_jwks
from spotpool.localworld.emulator import SECRET_KEY
from spotpool.localworld.kube import Kube
from spotpool.localworld.operator import OperatorWorld, pool_manifest, secret_manifest
from tests.e2e.conftest import operator_world
from tests.sts_world import ACCOUNT_A, ACCOUNT_B, ACCOUNT_C, ROLE_B, configure, role

pytestmark = pytest.mark.e2e
PROVIDER = "local-cluster"
SERVICE_ACCOUNT = ("default", "spotpool-operator")
OPERATOR_ROLE = f"qcs::cam::uin/{ACCOUNT_C}:roleName/spotpool-operator"
UNTRUSTED_ROLE = f"qcs::cam::uin/{ACCOUNT_B}:roleName/someone-elses"
REVOCABLE_ROLE = f"qcs::cam::uin/{ACCOUNT_B}:roleName/revocable"
LIFE_SECONDS = 60  # the emulator's cap on every temporary key's life
TEAM = "e2e.spotpool/team"  # the namespace label the two teams' policies select
EXTERNAL_ID = "team-a-from-the-admin"  # ROLE_B's trust policy asks for it
TEAM_B_ROLE = f"qcs::cam::uin/{ACCOUNT_B}:roleName/team-b-launcher"
POLICIES = {
    "e2e-credentials-team-a": {
        "namespaces": {"selector": {"matchLabels": {TEAM: "a"}}},
        "operatorIdentity": True,
        "accounts": [ACCOUNT_B],
        "externalId": EXTERNAL_ID,
        # What pool_manifest's pools launch with, on the shared identities granted above.
        "launch": {"images": ["img-*"], "vpcs": ["DEFAULT"], "subnets": ["DEFAULT"]},
    },
    "e2e-credentials-team-b": {
        "namespaces": {"selector": {"matchLabels": {TEAM: "b"}}},
        "operatorIdentity": False,  # a say: refused at apply too
        "roles": [f"qcs::cam::uin/{ACCOUNT_B}:roleName/team-b-*"],
        "limits": {"instances": 2},
    },
}


class CredentialWorld:
    def __init__(self, operator: OperatorWorld, token_file: Path) -> None:
        self.operator = operator
        self.token_file = token_file

    def namespace(self, team: str) -> str:
        """A fresh namespace of `team` (the label its policy selects), with the opted-in
        `tencentcloud` Secret of account A's keys."""
        namespace = self.operator.namespace()
        self.operator.kube.ok("label", "namespace", namespace, f"{TEAM}={team}")
        return namespace

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
    policies = [
        {"apiVersion": "devops.jokerbai.com/v1", "kind": "SpotpoolAccessPolicy",
         "metadata": {"name": name}, "spec": spec}
        for name, spec in POLICIES.items()
    ]  # fmt: skip
    kube.ok("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                  "items": policies}))  # fmt: skip
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
                role(trusted_accounts=[ACCOUNT_A], external_id=EXTERNAL_ID),
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
        try:
            yield CredentialWorld(operator, token_file)
        finally:
            kube.run("delete", "spotpoolaccesspolicies", *POLICIES, "--wait=false")
            for obj in _admission():
                kube.run("delete", obj["kind"], obj["metadata"]["name"], "--wait=false")


def _admission() -> list[dict[str, Any]]:
    """The chart's ValidatingAdmissionPolicy and its binding, as Helm renders them."""
    text = chart.template({}, "spotpool-system", show_only="templates/admission.yaml")
    return chart.objects(text)


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
    namespace = world.namespace("a")  # its Secret holds account A's keys
    # The spec's sessionName and externalId are not what is sent: the policy's id and the
    # operator's session name are (ROLE_B's trust policy refuses any other external id).
    forged = {"roleArn": ROLE_B, "sessionName": "team-b", "externalId": "forged"}
    operator.apply(namespace, pool_manifest("gpu", minimum=2, assumeRole=forged))
    pool = operator.wait_ready(namespace, "gpu", 2)
    accounts = world.accounts_of(pool["metadata"]["uid"])
    assert len(accounts) == 2 and set(accounts.values()) == {ACCOUNT_B}
    calls = operator.emulator.admin_ok("GET", "/_emulator/requests")["Requests"]
    sent = {
        (c["Params"]["RoleSessionName"], c["Params"].get("ExternalId"))
        for c in calls
        if c["Action"] == "AssumeRole" and c["Params"]["RoleArn"] == ROLE_B
    }
    assert sent == {(f"spotpool_{namespace}_gpu", EXTERNAL_ID)}


def test_a_role_that_does_not_trust_the_caller_is_a_condition_saying_what_to_fix(
    world: CredentialWorld,
) -> None:
    operator = world.operator
    namespace = world.namespace("a")
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
    operator.kube.ok("label", "namespace", namespace, f"{TEAM}=a")
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
    namespace = world.namespace("a")
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


def _refused_at_apply(operator: OperatorWorld, namespace: str, manifest: dict[str, Any]) -> str:
    """The API server's refusal of `manifest`, once the admission policy is in force (a server
    dry-run until then: a create that slipped in before would make later applies no-ops)."""
    text = json.dumps(manifest)

    def refused() -> str | None:
        dry = operator.kube.run("-n", namespace, "apply", "--dry-run=server", "-f", "-", stdin=text)
        return dry.stderr if dry.returncode != 0 else None

    operator.wait_until(refused, f"{manifest['metadata']['name']} refused", 60)
    done = operator.kube.run("-n", namespace, "apply", "-f", "-", stdin=text)
    assert done.returncode != 0, done.stdout
    return done.stderr


def test_team_b_is_refused_team_as_role_and_the_operators_identity(
    world: CredentialWorld,
) -> None:
    operator = world.operator
    namespace = world.namespace("b")
    # Where admission did not stop them (the admission policy not installed yet, as with the
    # chart's accessPolicy.admission off), the operator refuses: a condition naming the policy
    # and what to change, and nothing created.
    stolen = pool_manifest("stolen", assumeRole={"roleArn": ROLE_B})
    own = pool_manifest("own", useOperatorIdentity=True)
    del own["spec"]["credentialsSecretRef"]
    for manifest in (stolen, own):
        operator.apply(namespace, manifest)
    for name, reason in (("stolen", "RoleNotAllowed"), ("own", "OperatorIdentityNotAllowed")):
        found = operator.wait_until(
            partial(_condition_with, operator, namespace, name, reason), reason
        )
        assert (
            f"SpotpoolAccessPolicy e2e-credentials-team-b does not let namespace {namespace}"
            in (found["message"])
        )
        uid = operator.get(namespace, name)["metadata"]["uid"]  # type: ignore[index]
        assert operator.cloud(uid) == {}
    calls = operator.emulator.admin_ok("GET", "/_emulator/requests")["Requests"]
    sessions = [str((c["Params"] or {}).get("RoleSessionName")) for c in calls]
    assert not [s for s in sessions if s.startswith(f"spotpool_{namespace}_")]  # no STS call

    # With the chart's ValidatingAdmissionPolicy, `kubectl apply` refuses them.
    operator.kube.ok("apply", "-f", "-", stdin=yaml.safe_dump_all(_admission()))
    for manifest, says in ((stolen, f"assume role {ROLE_B}"), (own, "the operator's identity")):
        manifest["metadata"]["name"] += "-again"
        refused = _refused_at_apply(operator, namespace, manifest)
        assert "SpotpoolAccessPolicy e2e-credentials-team-b does not let namespace" in refused
        assert says in refused
    fine = pool_manifest("fine", assumeRole={"roleArn": TEAM_B_ROLE})  # team B's own role
    operator.kube.ok(
        "-n", namespace, "apply", "--dry-run=server", "-f", "-", stdin=json.dumps(fine)
    )
    # The operator's own patches of a pool admission would now refuse still pass: it goes.
    operator.kube.ok("-n", namespace, "delete", "spotpool", "stolen", "--timeout=60s")


def test_a_secret_that_did_not_opt_in_is_refused_as_if_it_did_not_exist(
    world: CredentialWorld,
) -> None:
    """(An admission policy cannot read Secrets: the operator refuses.)"""
    operator = world.operator
    namespace = world.namespace("b")
    operator.kube.ok("-n", namespace, "apply", "-f", "-",
                     stdin=json.dumps(secret_manifest("app-keys", consent=False)))  # fmt: skip
    for name, secret in (("borrowed", "app-keys"), ("missing", "no-such-secret")):
        operator.apply(namespace, pool_manifest(name, credentialsSecretRef={"name": secret}))
    messages = []
    for name, secret in (("borrowed", "app-keys"), ("missing", "no-such-secret")):
        found = operator.wait_until(partial(_condition_with, operator, namespace, name,
                                            "SecretNotFound"), name)  # fmt: skip
        messages.append(found["message"].replace(secret, "SECRET"))
        uid = operator.get(namespace, name)["metadata"]["uid"]  # type: ignore[index]
        assert operator.cloud(uid) == {}
    assert messages[0] == messages[1], "the conditions tell which Secret exists"
    assert "does not opt in" in messages[0]


def test_a_namespace_at_its_limit_is_held_there(world: CredentialWorld) -> None:
    operator = world.operator
    namespace = world.namespace("b")  # team B's policy: 2 instances a namespace
    operator.apply(namespace, pool_manifest("first", minimum=2))
    first = operator.wait_ready(namespace, "first", 2)
    before = operator.cloud(first["metadata"]["uid"])
    operator.apply(namespace, pool_manifest("second", minimum=1, maximum=3))
    limited = operator.wait_until(
        lambda: operator.condition(namespace, "second", "Limited") or None, "second held"
    )
    assert limited["status"] == "True" and limited["reason"] == "NamespaceLimit"
    assert (
        "held at 0 of 1 instances: SpotpoolAccessPolicy e2e-credentials-team-b limits"
        in (limited["message"])
    )
    second = operator.get(namespace, "second")
    assert second is not None and operator.cloud(second["metadata"]["uid"]) == {}
    assert operator.cloud(first["metadata"]["uid"]) == before  # untouched

    def shown() -> str | None:  # the policy's use, as `kubectl get` prints it
        policy = json.loads(operator.kube.ok(
            "get", "spotpoolaccesspolicy", "e2e-credentials-team-b", "-o", "json"))  # fmt: skip
        rows = [u for u in policy.get("status", {}).get("usage", []) if u["namespace"] == namespace]
        ready = rows and (rows[0]["pools"], rows[0]["instances"], rows[0]["held"]) == (2, 2, 1)
        return operator.kube.ok("get", "spotpoolaccesspolicy", "e2e-credentials-team-b") if (
            ready) else None  # fmt: skip

    table = operator.wait_until(shown, "the policy's status", 60)
    header, row = table.splitlines()[:2]
    columns = ["NAME", "POOLS", "INSTANCES", "RESERVED", "MAX-INSTANCES", "COST", "RESERVED-COST",
               "MAX-COST", "HELD", "AGE"]  # fmt: skip
    assert header.split() == columns
    starts = [header.index(c) for c in columns] + [len(row) + 1]
    cells = {c: row[a:b].strip() for c, a, b in zip(columns, starts, starts[1:], strict=False)}
    assert cells["MAX-INSTANCES"] == "2" and int(cells["HELD"]) >= 1 and cells["MAX-COST"] == ""
    assert int(cells["RESERVED"]) >= 2  # the first pool's two, reserved before their launch


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
