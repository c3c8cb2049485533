"""The credential forms at admission, in a real API server: CEL rules with clear messages, the
role's bounds from the OpenAPI schema, and `kubectl explain` reading their descriptions."""

import json
from pathlib import Path

import pytest
import yaml

from spotpool.localworld.emulator import wait_until
from spotpool.localworld.kube import Kube

pytestmark = pytest.mark.e2e
SAMPLE = Path(__file__).parents[2] / "examples" / "article-sample.yaml"
ROLE = "qcs::cam::uin/100000000002:roleName/spotpool-launcher"


def _manifest(name: str, keys: bool, **spec: object) -> str:
    manifest = yaml.safe_load(SAMPLE.read_text())
    manifest["metadata"]["name"] = name
    if not keys:
        del manifest["spec"]["secretId"], manifest["spec"]["secretKey"]
    manifest["spec"].update(spec)
    return json.dumps(manifest)


def _explain(kube: Kube, field: str) -> str:
    """`kubectl explain`, once the API server publishes the CRD's schema again (another module
    on this cluster may have just re-applied the CRD: discovery lags it by a moment)."""

    def answered() -> str | None:
        done = kube.run("explain", field)
        return done.stdout if done.returncode == 0 else None

    return wait_until(answered, f"kubectl explain {field}", timeout=60, every=1)


def test_kubectl_explain_describes_the_credential_forms(kube: Kube) -> None:
    assert "CAM role to assume" in _explain(kube, "spotpool.spec.assumeRole")
    assert "900 to 43200" in _explain(kube, "spotpool.spec.assumeRole.durationSeconds")
    assert "AssumeRoleWithWebIdentity" in _explain(kube, "spotpool.spec.useOperatorIdentity")
    assert "STS token" in _explain(kube, "spotpool.spec.credentialsSecretRef.tokenKey")


def test_the_three_forms_are_admitted(kube: Kube) -> None:
    forms: list[tuple[str, bool, dict[str, object]]] = [
        ("with-role", True, {"assumeRole": {"roleArn": ROLE, "externalId": "team-b"}}),
        ("own-identity", False, {"useOperatorIdentity": True}),
        ("chained", False, {"useOperatorIdentity": True, "assumeRole": {"roleArn": ROLE}}),
    ]
    for name, keys, spec in forms:
        kube.ok("apply", "--dry-run=server", "-f", "-", stdin=_manifest(name, keys, **spec))


@pytest.mark.parametrize(
    ("keys", "spec", "says"),
    [
        (True, {"useOperatorIdentity": True}, "useOperatorIdentity takes no keys"),
        (False, {}, "or useOperatorIdentity: true"),
        (True, {"assumeRole": {"roleArn": "arn:aws:iam::1:role/x"}}, "spec.assumeRole.roleArn"),
        (True, {"assumeRole": {"roleArn": ROLE, "durationSeconds": 60}}, "durationSeconds"),
    ],
)
def test_credential_mistakes_are_refused_with_a_clear_message(
    kube: Kube, keys: bool, spec: dict[str, object], says: str
) -> None:
    refused = kube.run("apply", "--dry-run=server", "-f", "-", stdin=_manifest("bad", keys, **spec))
    assert refused.returncode != 0
    assert says in refused.stderr
