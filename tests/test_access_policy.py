"""SpotpoolAccessPolicy's rules (spotpool.api.access), pure: which namespaces a policy selects,
every selecting policy applying (none: the defaults), ARN patterns, the external id, and the use
a policy's status shows (a pool held at the limits: tests/test_access_ledger.py)."""

from typing import Any

import pytest

from spotpool.api.access import (
    Access,
    AccessPolicySpec,
    NamedPolicy,
    Use,
    consents,
    policy_status,
    role_matches,
)

pytestmark = pytest.mark.unit
ROLE_A = "qcs::cam::uin/100000000002:roleName/team-a-launcher"
ROLE_B = "qcs::cam::uin/100000000003:roleName/team-b-launcher"


def policy(name: str, **spec: Any) -> NamedPolicy:
    spec.setdefault("namespaces", {"names": [name]})
    return NamedPolicy(name, AccessPolicySpec.model_validate(spec))


def access(namespace: str, *policies: NamedPolicy, **labels: str) -> Access:
    return Access.of(namespace, labels, list(policies))


def test_with_no_policy_the_operator_identity_and_every_role_are_refused() -> None:
    none = access("team-b")
    assert none.operator_identity() is not None and none.role(ROLE_A) is not None
    refused = none.role(ROLE_A)
    assert refused is not None and refused.reason == "RoleNotAllowed"
    assert "no SpotpoolAccessPolicy selects namespace team-b" in refused.message
    assert not none.secret_allowed("tencentcloud") and none.limits() == []


def test_a_policy_grants_only_its_namespaces_what_it_names() -> None:
    team_a = policy("team-a", roles=["qcs::cam::uin/100000000002:roleName/team-a-*"])
    team_b = policy("team-b", roles=[ROLE_B], operatorIdentity=False)
    assert access("team-a", team_a, team_b).role(ROLE_A) is None
    refused = access("team-b", team_a, team_b).role(ROLE_A)
    assert refused is not None
    assert (
        "SpotpoolAccessPolicy team-b does not let namespace team-b assume role" in refused.message
    )
    assert access("team-b", team_a, team_b).operator_identity() is not None


def test_every_policy_selecting_a_namespace_applies() -> None:
    granting = policy("roles", namespaces={"selector": {}}, roles=[ROLE_A])
    limits = policy("limits", namespaces={"selector": {}}, limits={"instances": 4})
    # A budget-only policy has no say on roles (tests/test_access_grants.py: tri-state).
    assert access("team-a", granting, limits).role(ROLE_A) is None
    narrower = policy("narrower", namespaces={"selector": {}}, roles=[ROLE_B])
    refused = access("team-a", granting, narrower).role(ROLE_A)
    assert refused is not None and "SpotpoolAccessPolicy narrower" in refused.message


def test_label_selectors() -> None:
    chosen = policy(
        "gpu-teams",
        namespaces={
            "selector": {
                "matchLabels": {"tier": "gpu"},
                "matchExpressions": [
                    {"key": "team", "operator": "In", "values": ["a", "b"]},
                    {"key": "frozen", "operator": "DoesNotExist"},
                ],
            }
        },
    )
    assert chosen.selects("x", {"tier": "gpu", "team": "a"})
    assert not chosen.selects("x", {"tier": "gpu", "team": "c"})
    assert not chosen.selects("x", {"tier": "gpu", "team": "a", "frozen": "yes"})
    assert not chosen.selects("x", {"team": "a"})


def test_role_patterns_and_accounts() -> None:
    assert role_matches("qcs::cam::uin/*:roleName/team-a-*", ROLE_A)
    assert not role_matches("qcs::cam::uin/100000000002:roleName/team-a", ROLE_A)
    assert not role_matches("qcs::cam::uin/1000000000.2:roleName/team-a-launcher", ROLE_A)
    by_account = policy("a", accounts=["100000000002"])
    assert access("a", by_account).role(ROLE_A) is None
    assert access("a", by_account).role(ROLE_B) is not None


def test_the_external_id_is_the_policies_and_a_conflict_is_refused() -> None:
    one = policy("one", namespaces={"names": ["t"]}, externalId="from-the-admin")
    assert access("t", one).external_id() == "from-the-admin"
    other = policy("other", namespaces={"names": ["t"]}, externalId="another")
    conflict = access("t", one, other).external_id()
    assert not isinstance(conflict, str) and conflict is not None
    assert conflict.reason == "PolicyConflict"


def test_regions_and_secrets() -> None:
    only = policy("t", regions=["ap-singapore"], secrets=["legacy-*"])
    assert access("t", only).region("ap-singapore") is None
    refused = access("t", only).region("ap-tokyo")
    assert refused is not None and "ap-singapore" in refused.message
    assert access("t", only).secret_allowed("legacy-keys")
    assert not access("t", only).secret_allowed("tencentcloud")


def test_consent() -> None:
    key = "spotpool.devops.jokerbai.com/usable"
    assert consents({key: "true"}, {}) and consents({}, {key: "true"})
    assert not consents({key: "yes"}, {}) and not consents({}, {})


def test_a_policys_status_counts_its_namespaces_only() -> None:
    selected = policy("teams", namespaces={"selector": {"matchLabels": {"team": "x"}}},
                      limits={"instances": 4})  # fmt: skip
    labels = {"a": {"team": "x"}, "b": {"team": "x"}, "c": {}}
    pools = [
        ("a", Use(2, 2, 1.5), False),
        ("a", Use(2, 0, 1.0), True),
        ("b", Use(1, 0, 0.5), False),
        ("c", Use(9, 9, 9.0), False),
    ]
    status = policy_status(selected, labels, pools)
    assert (status.pools, status.instances, status.gpus, status.held) == (3, 5, 2, 1)
    assert status.hourly_cost == 3.0 and status.busiest == "a" and status.namespaces == 2
    assert [u.namespace for u in status.usage] == ["a", "b"]
