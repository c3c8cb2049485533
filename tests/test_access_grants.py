"""The grants of SpotpoolAccessPolicies (spotpool.api.grants, access.py), pure: tri-state fields
(unset: no opinion, so a budget-only policy grants and refuses nothing; what no policy grants
is refused), the installs a namespace may be served by, what a pool on a shared identity may
launch with, and the STS session names (spotpool.api.identity)."""

import re
from typing import Any

import pytest

from spotpool.api.access import Access, AccessPolicySpec, NamedPolicy
from spotpool.api.grants import launch_values
from spotpool.api.identity import MAX_SESSION, session_name, sweep_session_name
from spotpool.api.spec import SpotpoolSpec

pytestmark = pytest.mark.unit
ROLE_A = "qcs::cam::uin/100000000002:roleName/team-a-launcher"
LAUNCH = {"images": ["img-*"], "vpcs": ["DEFAULT"], "subnets": ["DEFAULT"]}


def policy(name: str, **spec: Any) -> NamedPolicy:
    spec.setdefault("namespaces", {"names": ["team-b"]})
    return NamedPolicy(name, AccessPolicySpec.model_validate(spec))


def access(*policies: NamedPolicy) -> Access:
    return Access.of("team-b", {}, list(policies))


def pool(**spec: Any) -> SpotpoolSpec:
    base = {
        "region": "ap-singapore",
        "availabilityZone": "ap-singapore-2",
        "instanceType": "GN7.2XLARGE32",
        "maximum": 2,
        "imageId": "img-eb30mz89",
        "useOperatorIdentity": True,
    }
    return SpotpoolSpec.model_validate({**base, **spec})


def test_a_budget_only_policy_grants_and_refuses_nothing() -> None:
    budget = policy("budget", namespaces={"selector": {}}, limits={"instances": 10})
    team = policy("team-b", operatorIdentity=True, roles=[ROLE_A], secrets=["legacy"])
    both = access(budget, team)
    assert both.operator_identity() is None and both.role(ROLE_A) is None
    assert both.secret_allowed("legacy")
    alone = access(budget)  # selects the namespace and grants nothing: deny by default
    refused = alone.operator_identity()
    assert refused is not None and refused.reason == "OperatorIdentityNotAllowed"
    assert "no SpotpoolAccessPolicy selecting namespace team-b grants" in refused.message
    assert alone.role(ROLE_A) is not None and not alone.secret_allowed("legacy")


def test_a_policys_explicit_say_refuses_whatever_another_grants() -> None:
    team = policy("team-b", operatorIdentity=True, roles=[ROLE_A], secrets=["legacy"])
    # An old policy keeps its meaning: the API server stored its default `false` (and lists
    # set, even empty, are a say).
    strict = policy("strict", operatorIdentity=False, roles=[], secrets=[])
    both = access(team, strict)
    refused = both.operator_identity()
    assert refused is not None and "SpotpoolAccessPolicy strict does not let" in refused.message
    refused = both.role(ROLE_A)
    assert refused is not None and "SpotpoolAccessPolicy strict" in refused.message
    assert not both.secret_allowed("legacy")
    by_account = policy("accounts", accounts=["100000000002"])  # a say on roles too
    assert access(team, by_account).role(ROLE_A) is None
    assert access(team, policy("other", accounts=["100000000009"])).role(ROLE_A) is not None


@pytest.mark.parametrize(
    ("policies", "named", "allowed"),
    [
        ([], "", True),  # the defaults: the install with no class only
        ([], "gpu", False),
        ([policy("budget", limits={"instances": 1})], "", True),
        ([policy("budget", limits={"instances": 1})], "gpu", False),
        ([policy("t", operatorClasses=["gpu"])], "gpu", True),
        ([policy("t", operatorClasses=["gpu"])], "", False),  # a say leaving it out
        ([policy("t", operatorClasses=["", "gpu"])], "", True),
        (
            [policy("a", operatorClasses=["gpu"]), policy("b", operatorClasses=["cpu"])],
            "gpu",
            False,
        ),
        ([policy("a", operatorClasses=["gpu"]), policy("b", limits={})], "gpu", True),
    ],
)
def test_which_installs_may_serve_a_namespace(
    policies: list[NamedPolicy], named: str, allowed: bool
) -> None:
    refused = access(*policies).operator_class(named)
    assert (refused is None) == allowed
    if refused is not None:
        assert refused.reason == "OperatorClassNotAllowed"
        assert (repr(named) if named else "the install with no class") in refused.message


def test_launch_fields_on_a_shared_identity_are_denied_unless_granted() -> None:
    granted = policy("team-b", operatorIdentity=True, launch=LAUNCH)
    assert access(granted).launch(pool()) is None
    refused = access(policy("team-b", operatorIdentity=True)).launch(pool())
    assert refused is not None and refused.reason == "ImageNotAllowed"
    assert "no SpotpoolAccessPolicy selecting namespace team-b grants image img-eb30mz89" in (
        refused.message
    )
    # The namespace's own keys (no role) launch with whatever they may: no grant asked.
    own = pool(useOperatorIdentity=False, credentialsSecretRef={"name": "keys"})
    assert access(policy("team-b")).launch(own) is None
    assert access(policy("team-b")).launch(own.model_copy(update={"assume_role": None})) is None


def test_team_b_may_not_name_team_as_instance_role() -> None:
    team_b = policy(
        "team-b", operatorIdentity=True, launch={**LAUNCH, "instanceRoles": ["team-b-*"]}
    )
    refused = access(team_b).launch(pool(camRoleName="team-a-instance"))
    assert refused is not None and refused.reason == "InstanceRoleNotAllowed"
    assert "SpotpoolAccessPolicy team-b does not let namespace team-b use instance role" in (
        refused.message
    )
    assert access(team_b).launch(pool(camRoleName="team-b-trainer")) is None
    # Granted by no policy at all: refused too (deny by default).
    assert access(policy("team-b", launch=LAUNCH)).launch(pool(camRoleName="x")) is not None


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"imageIds": {"S5.MEDIUM2": "img-other"}}, None),
        ({"imageIds": {"S5.MEDIUM2": "img-teama"}}, "ImageNotAllowed"),
        ({"vpcId": "vpc-teama", "subnetId": "subnet-teama"}, "VpcNotAllowed"),
        ({"securityGroupIds": ["sg-teama"]}, "SecurityGroupNotAllowed"),
        ({"loginSettings": {"keyIds": ["skey-teama"]}}, "KeyNotAllowed"),
    ],
)
def test_every_launch_field_the_spec_names_is_checked(
    changes: dict[str, Any], reason: str | None
) -> None:
    launch = {**LAUNCH, "images": ["img-eb30mz89", "img-other"]}
    refused = access(policy("team-b", operatorIdentity=True, launch=launch)).launch(pool(**changes))
    assert (refused.reason if refused else None) == reason


def test_launch_values_name_what_the_spec_names() -> None:
    spec = pool(
        availabilityZones=["ap-singapore-2", "ap-singapore-3"],
        vpcId="vpc-1",
        subnetIds={"ap-singapore-3": "subnet-3"},
        imageIds={"S5.MEDIUM2": "img-2"},
        securityGroupIds=["sg-1", "sg-1"],
        camRoleName="trainer",
    )
    assert launch_values(spec) == {
        "instance_roles": ["trainer"],
        "images": ["img-2", "img-eb30mz89"],
        "vpcs": ["vpc-1"],
        "subnets": ["DEFAULT", "subnet-3"],
        "security_groups": ["sg-1"],
        "key_ids": [],
    }


def test_session_names_are_unambiguous_and_within_stss_bounds() -> None:
    # spotpool-<namespace>-<pool> was the same for team/b-x and team-b/x.
    assert session_name("team", "b-x") == "spotpool_team_b-x"
    assert session_name("team-b", "x") == "spotpool_team-b_x"
    assert sweep_session_name("team-b") == "spotpool_team-b_=sweep"
    long_ns, long_pool = "n" * 63, "p.q" * 84
    names = [
        session_name("team", "b-x"),
        session_name("team-b", "x"),
        session_name("team-b", "sweep"),
        sweep_session_name("team-b"),
        session_name(long_ns, long_pool),
        session_name(long_ns, long_pool + "r"),
        session_name("a" * 30, long_pool),
        session_name("a" * 30, long_pool[:-1]),
        sweep_session_name(long_ns),
    ]
    assert len(set(names)) == len(names)
    for name in names:
        assert re.fullmatch(r"[\w+=,.@-]{2,64}", name), name
    assert len(session_name(long_ns, long_pool)) == MAX_SESSION
    # Shortened, a namespace that fits stays whole: a trust policy's spotpool_<ns>_* still holds.
    assert session_name("a" * 30, long_pool).startswith(f"spotpool_{'a' * 30}_p.q")
