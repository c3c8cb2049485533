"""The chart's `identity` values: the operator's own cloud identity as TKE's pod identity gives
it (TKE_ROLE_ARN, TKE_PROVIDER_ID, a projected service-account token for the STS audience)."""

import pytest
from spotpool_deploy import chart

from tests.deploy.rendered import container, env, objects, pod, refusal

pytestmark = pytest.mark.unit

ROLE = "qcs::cam::uin/100000000003:roleName/spotpool-operator"


def test_no_identity_by_default() -> None:
    found = objects()
    assert not {k for k in env(found) if k.startswith("TKE_")}
    assert "identity-token" not in {v["name"] for v in pod(found)["volumes"]}


def test_a_role_gives_the_operator_its_projected_token_and_the_tke_variables() -> None:
    found = objects({"identity": {"roleArn": ROLE, "providerId": "my-cluster"}})
    variables = env(found)
    assert variables["TKE_ROLE_ARN"] == ROLE
    assert variables["TKE_PROVIDER_ID"] == "my-cluster"
    token_dir = variables["TKE_WEB_IDENTITY_TOKEN_FILE"].rsplit("/", 1)[0]
    (volume,) = [v for v in pod(found)["volumes"] if v["name"] == "identity-token"]
    (source,) = volume["projected"]["sources"]
    expected = {"audience": "sts.cloud.tencent.com", "expirationSeconds": 3600, "path": "token"}
    assert source["serviceAccountToken"] == expected
    mounts = {m["name"]: m for m in container(found)["volumeMounts"]}
    assert mounts["identity-token"]["mountPath"] == token_dir
    assert mounts["identity-token"]["readOnly"] is True


def test_identity_mistakes_are_refused() -> None:
    assert "roleArn" in refusal({"identity": {"roleArn": "arn:aws:iam::1:role/x"}})
    assert "tokenExpirationSeconds" in refusal({"identity": {"tokenExpirationSeconds": 60}})
    with pytest.raises(chart.ChartError, match=r"identity\.providerId is required"):
        objects({"identity": {"roleArn": ROLE}})
