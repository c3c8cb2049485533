"""Grants that name their install and their launch fields, and identity that follows the grant
(issue 46, builds 3-4), on one world: a real kube-apiserver, one operator process serving the
operatorClass `blue` with an identity of its own (its service-account token, trusted by the
emulator's CAM), the emulator as the cloud.

- a pool naming an install its namespace is not granted is refused by that install (a
  condition, nothing launched) and, with the chart's admission policy, at `kubectl apply`;
- team B's pool on the operator's identity naming team A's instance role (camRoleName) is
  refused in the operator and at apply;
- two pools whose session names used to be one (`team`/`b-x`, `team-b`/`x`) get two, on their
  roles and on the operator's own identity;
- a role grant withdrawn is used by nothing — no call signed as the role, no STS assumption of
  it — within one probe period, while the other pool's role goes on; the pool says why.
"""

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
import yaml
from spotpool_deploy import chart

from spotpool.cluster.oidc import ISSUER, STS_AUDIENCE, cluster_jwks
from spotpool.localworld.kube import Kube
from spotpool.localworld.operator import OperatorWorld, pool_manifest
from tests.e2e.conftest import operator_world
from tests.sts_world import ACCOUNT_B, ACCOUNT_C, configure, role

pytestmark = pytest.mark.e2e
CLASS = "blue"  # the world's operator serves only pools naming it
PREFIX = "gr-"
TEAM = "e2e.spotpool/grants"  # the namespace label the team policies select
SERVICE_ACCOUNT = ("default", "spotpool-operator")
OPERATOR_ROLE = f"qcs::cam::uin/{ACCOUNT_C}:roleName/spotpool-operator"
# Account B's roles, assumed with the operator's identity: one for each pool of the session test.
LAUNCHERS = ("team-a-launcher", "team-a-trainer-launcher")
ROLES = tuple(f"qcs::cam::uin/{ACCOUNT_B}:roleName/{name}" for name in LAUNCHERS)
# The launch fields of pool_manifest's pools, granted to both teams on the shared identity.
LAUNCH = {"images": ["img-*"], "vpcs": ["DEFAULT"], "subnets": ["DEFAULT"]}
POLICIES: dict[str, dict[str, Any]] = {
    "e2e-grants-a": {
        "namespaces": {"selector": {"matchLabels": {TEAM: "a"}}},
        "operatorClasses": [CLASS],
        "operatorIdentity": True,
        "launch": {**LAUNCH, "instanceRoles": ["team-a-*"]},
    },
    "e2e-grants-b": {
        "namespaces": {"selector": {"matchLabels": {TEAM: "b"}}},
        "operatorClasses": [CLASS],
        "operatorIdentity": True,
        "launch": {**LAUNCH, "instanceRoles": ["team-b-*"]},
    },
    "e2e-grants-c": {  # served by the install with no class only
        "namespaces": {"selector": {"matchLabels": {TEAM: "c"}}},
        "operatorClasses": [""],
    },
}
# The two namespaces of the session test, each selected by its policy alone (by name).
ROLE_POLICIES = ("e2e-grants-role-1", "e2e-grants-role-2")
WITHIN = 10.0  # seconds for a withdrawn grant to be seen: the policies' cache, one check
WATCHED = 20.0  # seconds after that in which nothing may use it


@dataclass
class Sessions:
    """The two pools whose session names were one: namespace, pool, uid."""

    pools: list[tuple[str, str, str]]


@dataclass
class GrantWorld:
    operator: OperatorWorld
    sessions: Sessions | None = None

    def namespace(self, team: str, name: str | None = None) -> str:
        """A namespace of `team` (the label its policy selects), with the opted-in Secret."""
        operator = self.operator
        if name is None:
            namespace = operator.namespace()
        else:
            namespace = name
            operator.kube.ok("create", "namespace", namespace)
            operator.namespaces.append(namespace)
        operator.kube.ok("label", "namespace", namespace, f"{TEAM}={team}")
        return namespace

    def requests(self) -> list[dict[str, Any]]:
        calls: list[dict[str, Any]] = self.operator.emulator.admin_ok("GET", "/_emulator/requests")[
            "Requests"
        ]
        return calls


@pytest.fixture(scope="module")
def world(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrantWorld]:
    namespace, name = SERVICE_ACCOUNT
    kube.run("-n", namespace, "create", "serviceaccount", name)
    token = kube.ok(
        "-n", namespace, "create", "token", name, f"--audience={STS_AUDIENCE}", "--duration=2h"
    ).strip()
    token_file = tmp_path_factory.mktemp("identity") / "token"
    token_file.write_text(token)
    env = {
        "TKE_ROLE_ARN": OPERATOR_ROLE,
        "TKE_PROVIDER_ID": "local-cluster",
        "TKE_WEB_IDENTITY_TOKEN_FILE": str(token_file),
        "SPOTPOOL_OPERATOR_CLASS": CLASS,
        "SPOTPOOL_INSTALL_ID": "grants-install",
        "SPOTPOOL_LEASE_NAME": "spotpool-grants",
    }
    _apply_policies(kube, POLICIES)
    directory = tmp_path_factory.mktemp("grants")
    with operator_world(kube, directory, env=env, namespace_prefix=PREFIX) as operator:
        configure(
            operator.emulator,
            OidcProviders=[
                {
                    "Name": "local-cluster",
                    "Issuer": ISSUER,
                    "ClientIds": [STS_AUDIENCE],
                    "Jwks": cluster_jwks(kube.kubeconfig.parent),
                }
            ],
            Roles=[
                *(role(name=name, trusted_accounts=[ACCOUNT_C]) for name in LAUNCHERS),
                role(
                    account=ACCOUNT_C,
                    name="spotpool-operator",
                    subjects=[f"system:serviceaccount:{namespace}:{name}"],
                    issuer=ISSUER,
                ),
            ],
        )
        try:
            yield GrantWorld(operator)
        finally:
            kube.run("delete", "spotpoolaccesspolicies", *POLICIES, *ROLE_POLICIES, "--wait=false")
            for obj in _admission():
                kube.run("delete", obj["kind"], obj["metadata"]["name"], "--wait=false")


def _apply_policies(kube: Kube, policies: dict[str, dict[str, Any]]) -> None:
    items = [
        {"apiVersion": "devops.jokerbai.com/v1", "kind": "SpotpoolAccessPolicy",
         "metadata": {"name": name}, "spec": spec}
        for name, spec in policies.items()
    ]  # fmt: skip
    kube.ok(
        "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )


def _admission() -> list[dict[str, Any]]:
    """The chart's ValidatingAdmissionPolicy and its binding, as Helm renders them."""
    text = chart.template({}, "spotpool-system", show_only="templates/admission.yaml")
    return chart.objects(text)


def _role_grant(namespace: str, role: str | None) -> dict[str, Any]:
    """The policy of one of the session test's namespaces: the install, the operator's
    identity, `role` (if any), the launch fields."""
    grant: dict[str, Any] = {
        "namespaces": {"names": [namespace]},
        "operatorClasses": [CLASS],
        "operatorIdentity": True,
        "launch": LAUNCH,
    }
    return {**grant, "roles": [role]} if role else grant


def _own_identity(name: str, **spec: Any) -> dict[str, Any]:
    """A pool of CLASS on the operator's own identity (no Secret)."""
    manifest = pool_manifest(name, operatorClass=CLASS, useOperatorIdentity=True, **spec)
    del manifest["spec"]["credentialsSecretRef"]
    return manifest


def _refused(operator: OperatorWorld, namespace: str, name: str, reason: str) -> dict[str, Any]:
    """The pool's Degraded condition of `reason`, once the operator wrote it."""

    def found() -> dict[str, Any] | None:
        condition = operator.condition(namespace, name, "Degraded")
        return condition if condition.get("reason") == reason else None

    condition: dict[str, Any] = operator.wait_until(found, f"{namespace}/{name}: {reason}", 90)
    return condition


def test_a_pool_naming_an_install_its_namespace_is_not_granted_is_refused(
    world: GrantWorld,
) -> None:
    operator = world.operator
    namespace = world.namespace("c")  # granted the install with no class only
    operator.apply(namespace, pool_manifest("borrowed", operatorClass=CLASS))
    condition = _refused(operator, namespace, "borrowed", "OperatorClassNotAllowed")
    assert (
        f"SpotpoolAccessPolicy e2e-grants-c does not let operatorClass '{CLASS}' serve "
        f"namespace {namespace}" in condition["message"]
    )
    pool = operator.get(namespace, "borrowed")
    assert pool is not None and operator.cloud(pool["metadata"]["uid"]) == {}
    assert ("Warning", "OperatorClassNotAllowed") in [
        (kind, reason) for kind, reason, _ in operator.events(namespace, "borrowed")
    ]


def test_team_bs_pool_naming_team_as_instance_role_is_refused_by_the_operator(
    world: GrantWorld,
) -> None:
    operator = world.operator
    namespace = world.namespace("b")
    operator.apply(namespace, _own_identity("borrowed-role", camRoleName="team-a-trainer"))
    condition = _refused(operator, namespace, "borrowed-role", "InstanceRoleNotAllowed")
    assert (
        f"SpotpoolAccessPolicy e2e-grants-b does not let namespace {namespace} use instance "
        "role team-a-trainer (camRoleName)" in condition["message"]
    )
    pool = operator.get(namespace, "borrowed-role")
    assert pool is not None and operator.cloud(pool["metadata"]["uid"]) == {}
    sessions = {str((c["Params"] or {}).get("RoleSessionName")) for c in world.requests()}
    assert f"spotpool_{namespace}_borrowed-role" not in sessions  # refused before any STS call


def test_two_pools_whose_session_names_were_one_get_two(world: GrantWorld) -> None:
    operator = world.operator
    base = f"{PREFIX}{uuid.uuid4().hex[:6]}"
    # spotpool-<namespace>-<pool> named both spotpool-<base>-b-x.
    pools = [(world.namespace("s", base), "b-x"), (world.namespace("s", f"{base}-b"), "x")]
    grants = zip(ROLE_POLICIES, pools, ROLES, strict=True)
    _apply_policies(operator.kube, {name: _role_grant(ns, r) for name, (ns, _), r in grants})
    for (namespace, name), role_arn in zip(pools, ROLES, strict=True):
        manifest = _own_identity(name, minimum=1, assumeRole={"roleArn": role_arn})
        operator.apply(namespace, manifest)
    ready = [operator.wait_ready(namespace, name, 1) for namespace, name in pools]
    world.sessions = Sessions(
        [(ns, name, pool["metadata"]["uid"]) for (ns, name), pool in zip(pools, ready, strict=True)]
    )
    launched = {i["Account"] for i in operator.emulator.all_instances()
                if {"Key": "spotpool-pool-uid", "Value": ready[0]["metadata"]["uid"]}
                in (i.get("Tags") or [])}  # fmt: skip
    assert launched == {ACCOUNT_B}  # through the role, assumed with the operator's identity
    expected = {f"spotpool_{base}_b-x", f"spotpool_{base}-b_x"}
    for action in ("AssumeRoleWithWebIdentity", "AssumeRole"):
        sessions = {
            c["Params"]["RoleSessionName"]
            for c in world.requests()
            if c["Action"] == action
            and c["Code"] == "OK"
            and base in c["Params"]["RoleSessionName"]
        }
        assert sessions == expected, action


def test_a_withdrawn_role_is_used_by_nothing_within_one_probe_period(world: GrantWorld) -> None:
    assert world.sessions is not None, "needs the pools of the session test"
    operator = world.operator
    _, (revoked_ns, revoked, uid) = world.sessions.pools
    before = operator.cloud(uid)
    withdrawn = time.time()  # its policy grants the role no more (and nothing else does)
    _apply_policies(operator.kube, {ROLE_POLICIES[1]: _role_grant(revoked_ns, None)})
    time.sleep(max(0.0, withdrawn + WITHIN + WATCHED - time.time()))

    def as_role(launcher: str, since: float) -> list[dict[str, Any]]:
        """Calls signed as the role (any session), and its assumptions, since `since`."""
        return [
            c
            for c in world.requests()
            if c["Time"] > since
            and (
                f"assumed-role/{launcher}/" in str(c.get("Caller", ""))
                or (c["Params"] or {}).get("RoleArn", "").endswith(f"/{launcher}")
            )
        ]

    last = max((c["Time"] - withdrawn for c in as_role(LAUNCHERS[1], withdrawn)), default=0.0)
    print(f"the withdrawn role: last call {last:.1f} s after the withdrawal")
    used = [c["Action"] for c in as_role(LAUNCHERS[1], withdrawn + WITHIN)]
    assert used == []  # no look, no price read, no sweep, no renewal
    assert as_role(LAUNCHERS[0], withdrawn + WITHIN), "the pool still granted goes on"
    own = f"assumed-role/spotpool-operator/spotpool_{revoked_ns}_{revoked}"
    assert not [c for c in world.requests() if c["Time"] > withdrawn + WITHIN
                and str(c.get("Caller", "")).endswith(own)]  # its operator session too  # fmt: skip
    assert operator.cloud(uid) == before  # nothing launched, nothing terminated
    condition = operator.condition(revoked_ns, revoked, "Degraded")  # and the pool says why
    assert condition.get("reason") == "RoleNotAllowed" and ROLES[1] in condition["message"]
    changed = datetime.fromisoformat(condition["lastTransitionTime"]).timestamp()
    assert changed - withdrawn < WITHIN, f"said {changed - withdrawn:.0f} s after"
    print(f"the pool said why {changed - withdrawn:.0f} s after")
    assert operator.alive()


def test_admission_refuses_another_installs_class_and_team_as_instance_role(
    world: GrantWorld,
) -> None:
    operator = world.operator
    operator.kube.ok("apply", "-f", "-", stdin=yaml.safe_dump_all(_admission()))
    team_c, team_b = world.namespace("c"), world.namespace("b")
    cases = [
        (team_c, pool_manifest("other-install", operatorClass=CLASS),
         f"be served by operatorClass '{CLASS}'"),
        (team_b, _own_identity("stolen-role", camRoleName="team-a-trainer"),
         "launch instances with instance role team-a-trainer (camRoleName)"),
    ]  # fmt: skip
    for namespace, manifest, says in cases:
        refused = _refused_at_apply(operator, namespace, manifest)
        assert "SpotpoolAccessPolicy e2e-grants-" in refused and says in refused
    own = _own_identity("own-role", camRoleName="team-b-trainer")  # team B's own: admitted
    operator.kube.ok("-n", team_b, "apply", "--dry-run=server", "-f", "-", stdin=json.dumps(own))


def _refused_at_apply(operator: OperatorWorld, namespace: str, manifest: dict[str, Any]) -> str:
    """The API server's refusal of `manifest`, once the admission policy is in force (a server
    dry-run until then)."""
    text = json.dumps(manifest)

    def refused() -> str | None:
        dry = operator.kube.run("-n", namespace, "apply", "--dry-run=server", "-f", "-", stdin=text)
        return dry.stderr if dry.returncode != 0 else None

    operator.wait_until(refused, f"{manifest['metadata']['name']} refused", 60)
    done = operator.kube.run("-n", namespace, "apply", "-f", "-", stdin=text)
    assert done.returncode != 0, done.stdout
    return done.stderr
