"""The operator under SpotpoolAccessPolicies (fake cluster, fake engine): a role, the operator's
identity or a Secret that did not opt in is refused with a condition and no engine call; the
role is assumed with the policy's external id and the operator's session name, never the
spec's; a pool is held at its namespace's limit, the Limited condition saying why."""

from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from spotpool_operator.basics.credentials import login_password, resolve
from spotpool_operator.basics.failures import PoolProblem
from spotpool_operator.reporting.kube import PoolUse

from spotpool.api.access import AccessPolicySpec, NamedPolicy
from spotpool.api.identity import AssumeRole
from spotpool.api.spec import SpotpoolSpec
from spotpool.engine.tencent.credentials import Credentials
from tests.operator.fakes import FakeCluster, make_world, pool_body, ref, run

pytestmark = pytest.mark.unit
ROLE = "qcs::cam::uin/100000000002:roleName/team-a-launcher"
# What a pool on a shared identity launches with here (pool_body): granted.
LAUNCH = {"images": ["img-*"], "vpcs": ["DEFAULT"], "subnets": ["DEFAULT"]}


def grant(name: str = "team-a", **spec: Any) -> NamedPolicy:
    spec.setdefault("namespaces", {"names": ["team-a"]})
    return NamedPolicy(name, AccessPolicySpec.model_validate(spec))


class Assumed:
    """A credential cache that records the roles asked for instead of calling STS."""

    def __init__(self) -> None:
        self.roles: list[AssumeRole] = []

    def role(
        self, base: Credentials, role: AssumeRole, endpoint: str | None, check: object = None
    ) -> Credentials:
        self.roles.append(role)
        return Credentials(secret_id=SecretStr("AKIDtmp"), secret_key=SecretStr("tmp"))


def _resolve(cluster: FakeCluster, **spec: Any) -> Credentials:
    body = pool_body(**spec)
    parsed = SpotpoolSpec.model_validate(body["spec"])
    return resolve(cluster, "team-a", "gpu", parsed, cache=ASSUMED)  # type: ignore[arg-type]


ASSUMED = Assumed()


def _cluster(*policies: NamedPolicy) -> FakeCluster:
    cluster = FakeCluster(policies=list(policies))
    cluster.secrets[("team-a", "tencentcloud")] = {"secretId": b"AKID", "secretKey": b"key"}
    return cluster


@pytest.mark.parametrize(
    ("spec", "policies", "reason"),
    [
        ({"assumeRole": {"roleArn": ROLE}}, [], "RoleNotAllowed"),
        (
            {"assumeRole": {"roleArn": ROLE}},
            [grant(roles=[ROLE.replace("a-l", "b-l")])],
            "RoleNotAllowed",
        ),
        (
            {"useOperatorIdentity": True, "credentialsSecretRef": None},
            [],
            "OperatorIdentityNotAllowed",
        ),
        ({"region": "ap-tokyo"}, [grant(regions=["ap-singapore"])], "RegionNotAllowed"),
        ({"operatorClass": "gpu"}, [], "OperatorClassNotAllowed"),
        ({"operatorClass": "gpu"}, [grant(operatorClasses=[""])], "OperatorClassNotAllowed"),
        ({"assumeRole": {"roleArn": ROLE}}, [grant(roles=[ROLE])], "ImageNotAllowed"),
        (
            {"assumeRole": {"roleArn": ROLE}, "camRoleName": "team-b-instance"},
            [grant(roles=[ROLE], launch={**LAUNCH, "instanceRoles": ["team-a-*"]})],
            "InstanceRoleNotAllowed",
        ),
    ],
)
def test_what_no_policy_grants_is_refused_before_any_call(
    spec: dict[str, Any], policies: list[NamedPolicy], reason: str
) -> None:
    before = len(ASSUMED.roles)
    with pytest.raises(PoolProblem) as refused:
        _resolve(_cluster(*policies), **spec)
    assert refused.value.reason == reason
    assert len(ASSUMED.roles) == before


def test_the_role_is_assumed_with_the_policys_external_id_and_the_operators_session() -> None:
    cluster = _cluster(grant(roles=[ROLE], externalId="from-the-admin", launch=LAUNCH))
    _resolve(cluster, assumeRole={"roleArn": ROLE, "externalId": "forged", "sessionName": "team-b"})
    role = ASSUMED.roles[-1]
    assert (role.external_id, role.session_name) == ("from-the-admin", "spotpool_team-a_gpu")


def test_a_secret_that_did_not_opt_in_reads_as_one_that_does_not_exist() -> None:
    cluster = _cluster()
    cluster.secrets[("team-a", "app-keys")] = {"secretId": b"AKID", "secretKey": b"key"}
    cluster.unconsenting.add(("team-a", "app-keys"))
    messages = []
    for name in ("app-keys", "nothing-here"):
        with pytest.raises(PoolProblem) as refused:
            _resolve(cluster, credentialsSecretRef={"name": name})
        assert refused.value.reason == "SecretNotFound"
        messages.append(refused.value.message.replace(name, "NAME"))
    assert messages[0] == messages[1]  # nothing tells which Secrets exist
    cluster.policies = [grant(secrets=["app-*"])]  # or the admin lets the namespace use it
    assert _resolve(cluster, credentialsSecretRef={"name": "app-keys"}).secret_id
    password = pool_body(loginSettings={"passwordSecretRef": {"name": "app-keys", "key": "x"}})
    cluster.policies = []
    with pytest.raises(PoolProblem, match="does not opt in"):
        login_password(cluster, "team-a", SpotpoolSpec.model_validate(password["spec"]))


def test_a_pool_is_held_at_its_namespaces_limit_with_a_condition(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.cluster.policies = [grant(limits={"instances": 3})]
    other = {"replicas": 2, "instances": [{"instanceId": "ins-1"}, {"instanceId": "ins-2"}]}
    world.cluster.pools["team-a"] = [PoolUse("uid-other", "other", other, ["GN7.2XLARGE32"])]
    run(world.reconciler.converge(ref(pool_body(minimum=2))))
    assert [c.count for c in world.cloud.configs] == [1]
    status = world.cluster.last("team-a/gpu")
    limited = next(c for c in status["conditions"] if c["type"] == "Limited")
    assert limited["status"] == "True" and limited["reason"] == "NamespaceLimit"
    assert "held at 1 of 2" in limited["message"] and status["replicas"] == 1
    world.cluster.pools["team-a"] = []  # the other pool went: the next up takes the rest
    run(world.reconciler.converge(ref(pool_body(minimum=2, generation=2))))
    assert [c.count for c in world.cloud.configs] == [1, 2]
    status = world.cluster.last("team-a/gpu")
    assert "Limited" not in {c["type"] for c in status["conditions"]}
